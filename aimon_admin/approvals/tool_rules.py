"""Tool rules (U1, U3, U5) read and checked: the per-process index the tool chain reads, the
allow rules that answer a runtime's unattended calls, the checks a rule must pass to be
written, and what a rule would match before it is saved. Rules are written through
approvals/rules.py; this index is cached under the same rule set version as the skill
rule index (approvals/rule_version.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db.models import Q
from django.urls import reverse

from aimon_admin.approvals.choices import RequestKind, RuleAction
from aimon_admin.approvals.models import ApprovalRequest, ToolRule
from aimon_admin.approvals.policy import rule_action_for
from aimon_admin.approvals.rule_version import cached_index
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
    tool_label,
    tool_name_problems,
)
from aimon_admin.registry import selectors as registry_selectors
from aimon_admin.registry.choices import AnnotationTrust, ToolSource
from aimon_admin.registry.extensions import AllowRule
from aimon_admin.registry.models import Tool
from aimon_admin.registry.policy import axes_words, resolve
from aimon_admin.runtimes.models import AgentRuntime


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
    """The index of every tool rule, rebuilt when the rule set changed anywhere (as
    `rules.rule_index`; `rules.rule_index_reset` forgets both)."""
    return cached_index(
        ToolRule, lambda: ToolRuleIndex([_spec(rule) for rule in ToolRule.objects.all()]), version
    )


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


# --- Checks (U1, U3, U5) ----------------------------------------------------------------------

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
WHOLE_TOOL_CLAIMS_IGNORED = (
    "{tool} counts as destructive only because its server's claims are ignored: {server} claims "
    "it is not destructive. An allow for it must name a subject pattern, or, if you trust what "
    "{server} says of its tools, change its annotation trust first: {trust_page}"
)
# A rule is kept for a tool nobody has registered yet (it may be registered later), but the
# person saving it is told: until then it decides only calls of an unregistered tool.
TOOL_NOT_REGISTERED_WARNING = (
    "No runtime or enabled MCP server has registered {tool} yet: the rule is kept and applies "
    "once one does. Check the spelling if you expected it to act now."
)


def whole_tool_problem(
    *, server: str, tool: str, pattern: str, action: str, runtime: AgentRuntime | None
) -> str | None:
    """U3, U5: an ALLOW (or pre-approval) of the whole of a destructive or unregistered
    tool is refused, and so is one whose pattern is only wildcards. For a rule of every
    runtime, every registration of the tool counts: one destructive registration refuses it."""
    if action != RuleAction.ALLOW or not pattern_is_wholesale(pattern):
        return None
    registered = list(registry_selectors.tools_named(server=server, name=tool, runtime=runtime))
    if not registered:
        return WHOLE_TOOL_UNREGISTERED.format(tool=tool_label(server=server, tool=tool))
    refused = [found for found in registered if not whole_tool_allowed(found.axes)]
    if not refused:
        return None
    if all(_destructive_only_for_ignored_claims(found) for found in refused):
        return WHOLE_TOOL_CLAIMS_IGNORED.format(
            tool=tool_label(server=server, tool=tool),
            server=server,
            trust_page=reverse("registry:server-trust", args=[server]),
        )
    return PATTERN_WHOLE_DESTRUCTIVE


def _destructive_only_for_ignored_claims(tool: Tool) -> bool:
    """An MCP tool whose server's claims are ignored (T11), and which would be allowed whole
    were they trusted: the refusal says so, and where the trust is set."""
    if tool.source != ToolSource.MCP or tool.server.annotation_trust != AnnotationTrust.IGNORE:
        return False
    return whole_tool_allowed(resolve(tool.claims, AnnotationTrust.TRUST).axes)


def tool_rule_check(rule: ToolRule) -> None:
    """Refuses (ValidationError, each problem named by its field) a tool rule as it would be
    written: an action that is none, a pre-approval that is not one runtime's ALLOW, an ALLOW
    of the whole of a destructive or unregistered tool, a pattern its tool has no subject for."""
    server, tool, pattern, action, runtime = rule.server, rule.tool, rule.pattern, rule.action, rule.runtime
    problems: dict[str, list[str]] = {}
    if action not in RuleAction.values:
        problems["action"] = [f"Choose one of {', '.join(RuleAction.values)}."]
    if rule.unattended and action != RuleAction.ALLOW:
        problems["unattended"] = [PRE_APPROVAL_NEEDS_ALLOW]
    elif rule.unattended and runtime is None:
        problems["unattended"] = [PRE_APPROVAL_NEEDS_RUNTIME]
    whole = whole_tool_problem(server=server, tool=tool, pattern=pattern, action=action, runtime=runtime)
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
    if registry_selectors.tools_named(server=rule.server, name=rule.tool, runtime=rule.runtime).exists():
        return []
    return [TOOL_NOT_REGISTERED_WARNING.format(tool=tool_label(server=rule.server, tool=rule.tool))]


# --- What a rule would match, before it is saved (U1) -------------------------------------------

PREVIEW_RECENT_REQUESTS = 200  # the newest tool requests a preview looks through


@dataclass(frozen=True)
class Registration:
    """One place a rule's tool is registered: a runtime's own tool or an MCP server's."""

    where: str
    words: tuple[str, str, str]


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


def tool_rule_preview(*, text: str, action: str, runtime: AgentRuntime | None = None) -> ToolRulePreview:
    """What `text` would name and match as a rule with this action (of this runtime, or of
    every runtime): the preview beside the form, read before anything is saved."""
    try:
        parsed = parse_rule_text(text)
    except RuleTextError as exc:
        return ToolRulePreview(text=text, problems=exc.problems)
    registrations = [
        Registration(
            where=f"MCP server {found.server.name}" if found.server else f"runtime {found.runtime.name}",
            words=axes_words(found.axes),
        )
        for found in registry_selectors.tools_named(server=parsed.server, name=parsed.tool, runtime=runtime)
    ]
    requests = ApprovalRequest.objects.filter(
        kind=RequestKind.TOOL, server=parsed.server, tool=parsed.tool, subject__isnull=False
    )
    if runtime is not None:
        requests = requests.filter(runtime=runtime)
    # The distinct subjects of the newest tool requests for this tool, newest first.
    newest = requests.order_by("-created_at").values_list("subject", flat=True)[:PREVIEW_RECENT_REQUESTS]
    subjects = list(dict.fromkeys(newest))
    argument = registry_selectors.subject_argument_for(parsed.server, parsed.tool)
    read = [Subject(subject, kind=argument.kind) for subject in subjects]
    compiled = SubjectPattern.compile(parsed.pattern)
    for_allow = action == RuleAction.ALLOW
    matched = [subject.value for subject in read if compiled.matches(subject, for_allow=for_allow)]
    not_covered = [
        subject.value
        for subject in read
        if for_allow and subject.value not in matched and compiled.matches(subject, for_allow=False)
    ]
    return ToolRulePreview(
        text=text,
        label=tool_label(server=parsed.server, tool=parsed.tool),
        pattern=parsed.pattern,
        registrations=registrations,
        subject_argument=argument.argument,
        recent=len(subjects),
        matched=matched,
        not_covered=not_covered,
        refusal=whole_tool_problem(
            server=parsed.server, tool=parsed.tool, pattern=parsed.pattern, action=action, runtime=runtime
        )
        or "",
    )
