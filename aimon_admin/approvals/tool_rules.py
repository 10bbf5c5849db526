"""Tool argument rules `Tool(pattern)` (U1, U5): writes (audited, U7) and the per-process
index the tool chain reads.

The index is cached as the skill rule index is (approvals/rules.py): rebuilt only when the
rule set's version changes, the same version row, restamped in the same transaction as every
skill or tool rule change, so one read tells both caches whether they are fresh.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from aimon_admin.approvals.choices import RequestKind, RuleAction
from aimon_admin.approvals.models import ApprovalRequest, ToolRule
from aimon_admin.approvals.policy import rule_action_for
from aimon_admin.approvals.rules import _bump_version, _current_version
from aimon_admin.approvals.subject_patterns import (
    SubjectPattern,
    pattern_is_wholesale,
    pattern_within,
    subject_pattern_problems,
    whole_tool_allowed,
)
from aimon_admin.approvals.subjects import Subject
from aimon_admin.approvals.tool_rule_grammar import (
    PATTERN_WHOLE_DESTRUCTIVE,
    RuleTextError,
    ToolRuleIndex,
    ToolRuleSpec,
    parse_rule_text,
    rule_text,
    tool_label,
    tool_name_problems,
)
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.registry import selectors as registry_selectors
from aimon_admin.registry.extensions import AllowRule
from aimon_admin.registry.policy import axes_words
from aimon_admin.runtimes.models import AgentRuntime

_lock = threading.Lock()
_cached: tuple[int, ToolRuleIndex] | None = None


def _spec(rule: ToolRule) -> ToolRuleSpec:
    action = RuleAction(rule.action)
    unattended = rule.unattended
    if action == RuleAction.ALLOW and (
        tool_name_problems(rule.tool) or subject_pattern_problems(rule.pattern)
    ):
        # Fail closed: a stored ALLOW the grammar refuses (written around the services)
        # allows nothing; it asks instead, as a bad skill rule's ALLOW does.
        action, unattended = RuleAction.ASK, False
    if rule_action_for(action, rule.approvers) != action:
        # P3: an allow that needs several people asks them (and, unattended, has nobody to ask).
        action, unattended = RuleAction.ASK, False
    return ToolRuleSpec(
        id=rule.pk,
        runtime_id=rule.runtime_id,
        server=rule.server,
        tool=rule.tool,
        pattern=rule.pattern,
        action=action,
        unattended=unattended,
        approvers=rule.approvers,
    )


def tool_rule_index(version: int | None = None) -> ToolRuleIndex:
    """The index of every tool rule, rebuilt when the rule set changed anywhere.

    `version` is the rule set's version when the caller has just read it; otherwise it
    is read here (one primary-key lookup)."""
    global _cached
    if version is None:
        version = _current_version()
    cached = _cached
    if cached is not None and cached[0] == version:
        return cached[1]
    with _lock:
        index = ToolRuleIndex([_spec(rule) for rule in ToolRule.objects.all()])
        _cached = (version, index)
        return index


def tool_rule_index_reset() -> None:
    """Forget this process's cached tool rule index (`rules.rule_index_reset` calls this
    too, so tests that reset the skill index reset both)."""
    global _cached
    with _lock:
        _cached = None


def unattended_allow_rules(runtime: AgentRuntime) -> dict[tuple[str, str], list[AllowRule]]:
    """U5, for the gate simulator and the worklist: by (server, tool), the ALLOW rules that
    answer this runtime's unattended calls: its pre-approvals, and ALLOW rules of this
    runtime or of every runtime (they answer attended and unattended calls alike). A rule
    stored off the grammar allows nothing and is left out."""
    return unattended_allow_rules_many([runtime])[runtime.pk]


def unattended_allow_rules_many(
    runtimes: Sequence[AgentRuntime],
) -> dict[int, dict[tuple[str, str], list[AllowRule]]]:
    """`unattended_allow_rules` of several runtimes, by primary key, in one query (the home's
    forecast of every runtime): a rule of every runtime counts for each. An allow wholly
    under a rule that needs several people answers nothing (P3: only people answer there)
    and is left out."""
    ids = [runtime.pk for runtime in runtimes]
    found: dict[int, dict[tuple[str, str], list[AllowRule]]] = {pk: {} for pk in ids}
    rows = ToolRule.objects.exclude(action=RuleAction.DENY).filter(
        Q(runtime_id__in=ids) | Q(runtime__isnull=True)
    )
    specs = [_spec(rule) for rule in rows.order_by("server", "tool", "-unattended", "pattern", "id")]
    floors = [spec for spec in specs if spec.action == RuleAction.ASK and spec.approvers > 1]
    for spec in specs:
        if spec.action != RuleAction.ALLOW:
            continue
        allow = AllowRule(
            text=spec.text, pre_approval=spec.unattended, every_call=pattern_is_wholesale(spec.pattern)
        )
        for pk in ids if spec.runtime_id is None else [spec.runtime_id]:
            if any(
                (floor.server, floor.tool) == (spec.server, spec.tool)
                and floor.runtime_id in (None, pk)
                and pattern_within(spec.pattern, floor.pattern)
                for floor in floors
            ):
                continue
            found[pk].setdefault((spec.server, spec.tool), []).append(allow)
    return found


# --- Writes (U1, U5, U7) ------------------------------------------------------------------------

PRE_APPROVAL_NEEDS_ALLOW = "Only an Allow can be a pre-approval for unattended runs."
PRE_APPROVAL_NEEDS_RUNTIME = "A pre-approval answers one runtime's unattended runs: choose the runtime."
WHOLE_TOOL_UNREGISTERED = (
    "No runtime or enabled MCP server has registered {tool}, so it counts as destructive: an allow "
    "for it must name a subject pattern, e.g. {tool}(git status:*), never the whole tool."
)
PATTERN_WITHOUT_SUBJECT = (
    "{tool} has no subject argument, so a pattern can never match its calls and this rule "
    "would decide nothing. Name its subject first (the argument rules match, such as command "
    "or path: on the tool's page, or under toolSubjects in a configuration file), or write "
    "the rule for the whole tool: {tool}."
)
# A rule is kept for a tool nobody has registered yet (it may be registered later), but the
# person saving it is told: until then it decides only calls of an unregistered tool.
TOOL_NOT_REGISTERED_WARNING = (
    "No runtime or enabled MCP server has registered {tool} yet: the rule is kept and applies "
    "once one does. Check the spelling if you expected it to act now."
)
STORED_TOOL_RULE_INVALID = (
    "This rule's stored text is not valid: {problems} Delete the rule and write it again."
)


def _whole_tool_problem(
    *, server: str, tool: str, pattern: str, action: str, runtime: AgentRuntime | None
) -> str | None:
    """U3, U5: an ALLOW (or pre-approval) of the whole of a destructive or unregistered
    tool is refused, and so is one whose pattern is only wildcards. For a rule of every
    runtime, every registration of the tool counts: one destructive registration refuses it."""
    if action != RuleAction.ALLOW or not pattern_is_wholesale(pattern):
        return None
    label = tool_label(server=server, tool=tool)
    registered = [
        found.axes for found in registry_selectors.tools_named(server=server, name=tool, runtime=runtime)
    ]
    if not registered:
        return WHOLE_TOOL_UNREGISTERED.format(tool=label)
    if not all(whole_tool_allowed(axes) for axes in registered):
        return PATTERN_WHOLE_DESTRUCTIVE
    return None


def _check(
    *, server: str, tool: str, pattern: str, action: str, runtime: AgentRuntime | None, unattended: bool
) -> None:
    problems: dict[str, list[str]] = {}
    if action not in RuleAction.values:
        problems["action"] = [f"Choose one of {', '.join(RuleAction.values)}."]
    if unattended and action != RuleAction.ALLOW:
        problems["unattended"] = [PRE_APPROVAL_NEEDS_ALLOW]
    elif unattended and runtime is None:
        problems["unattended"] = [PRE_APPROVAL_NEEDS_RUNTIME]
    whole = _whole_tool_problem(server=server, tool=tool, pattern=pattern, action=action, runtime=runtime)
    if whole:
        problems["text"] = [whole]
    elif pattern and not registry_selectors.subject_argument_for(server, tool).argument:
        # U1: a pattern is matched against the subject; with none named it matches nothing,
        # and a rule that looks saved would block nothing.
        problems["text"] = [PATTERN_WITHOUT_SUBJECT.format(tool=tool_label(server=server, tool=tool))]
    if problems:
        raise ValidationError(problems)


def tool_rule_warnings(rule: ToolRule) -> list[str]:
    """What the person who saved `rule` should know although it was saved: its tool is not
    registered by anyone yet (a typo, or a tool still to come)."""
    registered = registry_selectors.tools_named(server=rule.server, name=rule.tool, runtime=rule.runtime)
    if registered.exists():
        return []
    return [TOOL_NOT_REGISTERED_WARNING.format(tool=tool_label(server=rule.server, tool=rule.tool))]


def _snapshot(rule: ToolRule) -> dict[str, object]:
    return {
        "runtime": rule.runtime.name if rule.runtime else None,
        "text": rule_text(server=rule.server, tool=rule.tool, pattern=rule.pattern),
        "server": rule.server,
        "tool": rule.tool,
        "pattern": rule.pattern,
        "action": rule.action,
        "unattended": rule.unattended,
        "approvers": rule.approvers,
        "note": rule.note,
    }


def _text_of(rule: ToolRule) -> str:
    return rule_text(server=rule.server, tool=rule.tool, pattern=rule.pattern)


@transaction.atomic
def tool_rule_create(
    *,
    text: str,
    action: str,
    actor: Actor,
    runtime: AgentRuntime | None = None,
    unattended: bool = False,
    note: str = "",
    approvers: int = 1,
) -> ToolRule:
    """Writes an argument rule written as `Tool(pattern)` (U1): `Bash(git status:*)`,
    `Bash` for the whole tool, `git/git_push(origin:*)` for an MCP server's tool.
    `unattended` makes an ALLOW of one runtime a pre-approval for its unattended runs (U5).
    Refused, each problem named by its field: text off the grammar, a pre-approval that is
    not one runtime's ALLOW, an ALLOW of the whole of a destructive or unregistered tool,
    a rule that already exists."""
    try:
        parsed = parse_rule_text(text)
    except RuleTextError as exc:
        raise ValidationError({"text": exc.problems}) from exc
    _check(
        server=parsed.server,
        tool=parsed.tool,
        pattern=parsed.pattern,
        action=action,
        runtime=runtime,
        unattended=unattended,
    )
    rule = ToolRule(
        runtime=runtime,
        server=parsed.server,
        tool=parsed.tool,
        pattern=parsed.pattern,
        action=RuleAction(action),
        unattended=unattended,
        approvers=approvers,
        note=note,
    )
    rule.full_clean()
    rule.save()
    _bump_version()
    audit_record(
        action=AuditAction.TOOL_RULE_CREATED,
        actor=actor,
        runtime=runtime,
        subject_type="tool_rule",
        subject=_text_of(rule),
        details=_snapshot(rule),
    )
    return rule


@transaction.atomic
def tool_rule_update(
    *,
    rule: ToolRule,
    actor: Actor,
    action: str,
    unattended: bool,
    note: str = "",
    approvers: int | None = None,
) -> ToolRule:
    """Changes a rule's action, pre-approval, people who must allow (None: as it is; an open
    request keeps its number, P3) and note; its runtime and text stay (to change
    those, delete the rule and write another). Checked as `tool_rule_create` checks."""
    rule = ToolRule.objects.select_for_update(of=("self",)).select_related("runtime").get(pk=rule.pk)
    try:
        parse_rule_text(_text_of(rule))
    except RuleTextError as exc:
        # Written around the services: nothing keeps it alive but a deletion.
        raise ValidationError(
            {"text": [STORED_TOOL_RULE_INVALID.format(problems=" ".join(exc.problems))]}
        ) from exc
    before = _snapshot(rule)
    _check(
        server=rule.server,
        tool=rule.tool,
        pattern=rule.pattern,
        action=action,
        runtime=rule.runtime,
        unattended=unattended,
    )
    rule.action = RuleAction(action)
    rule.unattended = unattended
    if approvers is not None:
        rule.approvers = approvers
    rule.note = note
    after = _snapshot(rule)
    if before == after:
        return rule
    rule.full_clean()
    rule.save()
    _bump_version()
    audit_record(
        action=AuditAction.TOOL_RULE_CHANGED,
        actor=actor,
        runtime=rule.runtime,
        subject_type="tool_rule",
        subject=_text_of(rule),
        details={"before": before, "after": after},
    )
    return rule


@transaction.atomic
def tool_rule_delete(*, rule: ToolRule, actor: Actor) -> None:
    rule = ToolRule.objects.select_related("runtime").get(pk=rule.pk)
    before = _snapshot(rule)
    runtime = rule.runtime
    rule.delete()
    _bump_version()
    audit_record(
        action=AuditAction.TOOL_RULE_DELETED,
        actor=actor,
        runtime=runtime,
        subject_type="tool_rule",
        subject=str(before["text"]),
        details={"before": before},
    )


# --- What a rule would match, before it is saved (U1) -------------------------------------------

PREVIEW_RECENT_REQUESTS = 200  # the newest tool requests a preview looks through
PREVIEW_SAMPLE = 10


@dataclass(frozen=True)
class Registration:
    """One place a rule's tool is registered: a runtime's own tool or an MCP server's."""

    where: str
    words: tuple[str, str, str]
    destructive: bool


@dataclass(frozen=True)
class ToolRulePreview:
    """What a rule written as text would name and match: its problems if it is off the
    grammar; else the registrations of its tool, its subject argument, and which subjects
    of recent calls asked about it would match (for an ALLOW: also those that start the
    same way but which an allow never covers: a chained command, a `..` step)."""

    text: str
    problems: list[str] = field(default_factory=list)
    label: str = ""
    pattern: str = ""
    registrations: list[Registration] = field(default_factory=list)
    subject_argument: str = ""
    recent: int = 0
    matched: list[str] = field(default_factory=list)
    not_covered: list[str] = field(default_factory=list)
    refusal: str = ""

    @property
    def whole_tool(self) -> bool:
        return not self.pattern


def _recent_subjects(*, server: str, tool: str, runtime: AgentRuntime | None) -> list[str]:
    """The distinct subjects of the newest tool requests for this tool, newest first."""
    requests = ApprovalRequest.objects.filter(
        kind=RequestKind.TOOL, server=server, tool=tool, subject__isnull=False
    )
    if runtime is not None:
        requests = requests.filter(runtime=runtime)
    subjects = requests.order_by("-created_at").values_list("subject", flat=True)[:PREVIEW_RECENT_REQUESTS]
    return list(dict.fromkeys(subjects))


def tool_rule_preview(*, text: str, action: str, runtime: AgentRuntime | None = None) -> ToolRulePreview:
    """What `text` would name and match as a rule with this action (of this runtime, or of
    every runtime): the preview beside the form, read before anything is saved."""
    try:
        parsed = parse_rule_text(text)
    except RuleTextError as exc:
        return ToolRulePreview(text=text, problems=exc.problems)
    label = tool_label(server=parsed.server, tool=parsed.tool)
    registrations = [
        Registration(
            where=f"MCP server {found.server.name}" if found.server else f"runtime {found.runtime.name}",
            words=axes_words(found.axes),
            destructive=not whole_tool_allowed(found.axes),
        )
        for found in registry_selectors.tools_named(server=parsed.server, name=parsed.tool, runtime=runtime)
    ]
    subjects = _recent_subjects(server=parsed.server, tool=parsed.tool, runtime=runtime)
    argument = registry_selectors.subject_argument_for(parsed.server, parsed.tool)
    read = [Subject(subject, kind=argument.kind) for subject in subjects]
    compiled = SubjectPattern.compile(parsed.pattern)
    for_allow = action == RuleAction.ALLOW
    matched = [subject.value for subject in read if compiled.matches(subject, for_allow=for_allow)]
    not_covered = []
    if for_allow:
        not_covered = [
            subject.value
            for subject in read
            if not compiled.matches(subject, for_allow=True) and compiled.matches(subject, for_allow=False)
        ]
    refusal = ""
    if action in RuleAction.values:
        refusal = (
            _whole_tool_problem(
                server=parsed.server, tool=parsed.tool, pattern=parsed.pattern, action=action, runtime=runtime
            )
            or ""
        )
    return ToolRulePreview(
        text=text,
        label=label,
        pattern=parsed.pattern,
        registrations=registrations,
        subject_argument=argument.argument,
        recent=len(subjects),
        matched=matched,
        not_covered=not_covered,
        refusal=refusal,
    )
