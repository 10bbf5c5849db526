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
from aimon_admin.registry.choices import SubjectKind
from aimon_admin.registry.models import SERVER_NAME_VALIDATOR, ToolSubject
from aimon_admin.registry.policy import subject_kind_for

SUBJECT_ARGUMENT_MAX = 200  # ToolSubject.argument
SUBJECT_TOOL_MAX = 200  # ToolSubject.tool

SUBJECT_TOOL_EMPTY = "Name the tool whose subject argument this is."
SUBJECT_TOOL_TOO_LONG = "A tool name is at most {limit} characters; this has {length}."
SUBJECT_ARGUMENT_TOO_LONG = "An argument name is at most {limit} characters; this has {length}."
SUBJECT_CONTROL = "No control characters in a name (one at position {position})."
SUBJECT_KIND_BAD = '"{kind}" is not a kind of subject. Allowed values: {allowed}.'
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
def tool_subject_set(
    *, server: str | None, tool: str, argument: str, actor: Actor, kind: SubjectKind | str | None = None
) -> ToolSubject | None:
    """Names (or with `argument` "" clears) the subject argument of one tool and how it is read
    (U1): a runtime's own tool with `server` None or "", an MCP tool with its server's name.
    `kind` None keeps the kind of an argument already named, and reads a newly named one as
    its usual kind (`registry.policy.subject_kind_for`: `command` a command, `path` a path).
    Returns the row, None when cleared. Audited (U7) with the argument and kind before and
    after; a call that changes nothing writes nothing."""
    server = server or ""
    problems = _subject_problems(server=server, tool=tool, argument=argument)
    if kind is not None and kind not in SubjectKind.values:
        problems["kind"] = [SUBJECT_KIND_BAD.format(kind=kind, allowed=", ".join(SubjectKind.values))]
    if problems:
        raise ValidationError(problems)
    current = ToolSubject.objects.select_for_update().filter(server=server, tool=tool).first()
    before = current.argument if current is not None else ""
    before_kind = current.kind if current is not None else ""
    if kind is None:
        kind = before_kind if current is not None and before == argument else subject_kind_for(argument)
    kind = SubjectKind(kind) if argument else ""
    if before == argument and before_kind == kind:
        return current
    if current is not None and not argument:
        current.delete()
        row = None
    elif current is None:
        row = ToolSubject(server=server, tool=tool, argument=argument, kind=kind)
        row.full_clean()
        row.save()
    else:
        current.argument = argument
        current.kind = kind
        current.full_clean()
        current.save()
        row = current
    label = f"{server}/{tool}" if server else tool
    audit_record(
        action=AuditAction.TOOL_SUBJECT_SET,
        actor=actor,
        subject_type="tool",
        subject=label,
        details={
            "server": server,
            "tool": tool,
            "before": before or None,
            "after": argument or None,
            "kind_before": before_kind or None,
            "kind_after": kind or None,
        },
    )
    return row
