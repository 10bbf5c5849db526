"""A tool's subject argument (U1): which argument's value argument rules and grants match
(`command` for a shell tool, `path` for a file tool). Named by server and tool, not by
tool row, so it may be set before the tool is first seen and outlives re-registrations."""

from __future__ import annotations

import unicodedata

from django.core.exceptions import ValidationError
from django.db import transaction

from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.registry.models import SERVER_NAME_VALIDATOR, ToolSubject

SUBJECT_ARGUMENT_MAX = 200  # ToolSubject.argument
SUBJECT_TOOL_MAX = 200  # ToolSubject.tool

SUBJECT_TOOL_EMPTY = "Name the tool whose subject argument this is."
SUBJECT_TOOL_TOO_LONG = "A tool name is at most {limit} characters; this has {length}."
SUBJECT_ARGUMENT_TOO_LONG = "An argument name is at most {limit} characters; this has {length}."
SUBJECT_CONTROL = "No control characters in a name (one at position {position})."
SUBJECT_SERVER_BAD = (
    "{server!r} is not an MCP server name: 1-100 letters, digits, dots, dashes or underscores."
)


def _control_position(text: str) -> int | None:
    for position, char in enumerate(text, start=1):
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            return position
    return None


def _subject_problems(*, server: str, tool: str, argument: str) -> dict[str, list[str]]:
    """What is wrong with naming `argument` the subject of `server/tool`, by field; empty if
    nothing (a pure check: load_config reads a file with it before anything is written)."""
    problems: dict[str, list[str]] = {}
    if server:
        try:
            SERVER_NAME_VALIDATOR(server)
        except ValidationError:
            problems["server"] = [SUBJECT_SERVER_BAD.format(server=server)]
    for field, value, limit, too_long in (
        ("tool", tool, SUBJECT_TOOL_MAX, SUBJECT_TOOL_TOO_LONG),
        ("argument", argument, SUBJECT_ARGUMENT_MAX, SUBJECT_ARGUMENT_TOO_LONG),
    ):
        found: list[str] = []
        if field == "tool" and not value:
            found.append(SUBJECT_TOOL_EMPTY)
        if len(value) > limit:
            found.append(too_long.format(limit=limit, length=len(value)))
        position = _control_position(value)
        if position is not None:
            found.append(SUBJECT_CONTROL.format(position=position))
        if found:
            problems[field] = found
    return problems


@transaction.atomic
def tool_subject_set(*, server: str | None, tool: str, argument: str, actor: Actor) -> ToolSubject | None:
    """Names (or with `argument` "" clears) the subject argument of one tool: a runtime's own
    tool with `server` None or "", an MCP tool with its server's name. Returns the row, None
    when cleared. Audited (U7) with the argument before and after; a call that changes
    nothing writes nothing."""
    server = server or ""
    problems = _subject_problems(server=server, tool=tool, argument=argument)
    if problems:
        raise ValidationError(problems)
    current = ToolSubject.objects.select_for_update().filter(server=server, tool=tool).first()
    before = current.argument if current is not None else ""
    if before == argument:
        return current
    if current is not None and not argument:
        current.delete()
        row = None
    elif current is None:
        row = ToolSubject(server=server, tool=tool, argument=argument)
        row.full_clean()
        row.save()
    else:
        current.argument = argument
        current.full_clean()
        current.save()
        row = current
    label = f"{server}/{tool}" if server else tool
    audit_record(
        action=AuditAction.TOOL_SUBJECT_SET,
        actor=actor,
        subject_type="tool",
        subject=label,
        details={"server": server, "tool": tool, "before": before or None, "after": argument or None},
    )
    return row
