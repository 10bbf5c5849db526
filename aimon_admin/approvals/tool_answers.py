"""What a person may answer to a tool request (U3): the patterns a deny may carry (an
allow's are `subject_patterns.pattern_choices`, never reaching what a rule needs more
people for, P3), the buttons offered, the pattern an answer carries, and an abort's. Pure
functions over `subject_patterns`."""

from __future__ import annotations

from collections.abc import Sequence

from aimon_admin.approvals.choices import Answer, GrantScope
from aimon_admin.approvals.policy import RequestShape, answers_offered
from aimon_admin.approvals.subject_patterns import pattern_choices, subject_pattern_problems
from aimon_admin.registry.choices import SubjectKind
from aimon_admin.registry.policy import ToolAxes

PATTERN_NOT_OFFERED = (
    "{pattern} is not one of the patterns offered for this call: pick the exact value, one of "
    "its prefixes, or (for a tool that is not destructive) the whole tool."
)


def deny_patterns(subject: str | None, axes: ToolAxes, kind: SubjectKind = SubjectKind.TEXT) -> list[str]:
    """The patterns a *Deny* may carry: those `pattern_choices` offers a deny, and the whole
    tool whatever the tool is (a Deny may always be as wide as the tool)."""
    choices = pattern_choices(subject, axes, for_allow=False, kind=kind)
    return choices if "" in choices else [*choices, ""]


def tool_answers_offered(
    shape: RequestShape, *, may_grant_agent: bool, allow_patterns: Sequence[str]
) -> list[Answer]:
    """The buttons on a tool request (U3; the labels docs/api.md uses): *Allow this call* where a session
    holds the request; *Allow for this session* and *Always allow for this agent* as for a
    skill (S4, S6, S13), and only where a pattern can be picked (a destructive tool with no
    subject has none: it is allowed one call at a time); *Deny* (or S13's *Deny this
    request*). No *Allow once*: a tool call is approved as itself, or by pattern."""
    offered: list[Answer] = [Answer.ALLOW_CALL] if shape.session_holder is not None else []
    for answer in answers_offered(shape, may_grant_agent=may_grant_agent, widest_scope=GrantScope.AGENT):
        if answer == Answer.ALLOW_ONCE:
            continue
        if answer in (Answer.ALLOW_SESSION, Answer.ALLOW_AGENT) and not allow_patterns:
            continue
        offered.append(answer)
    return offered


def answer_pattern(answer: Answer, chosen: str | None, *, allow: Sequence[str], deny: Sequence[str]) -> str:
    """The pattern an answer carries: the one chosen if it is offered for that answer, the
    narrowest offered when none was chosen; ValueError (PATTERN_NOT_OFFERED) otherwise.
    *Allow this call* and *Deny this request* carry none."""
    if answer in (Answer.ALLOW_CALL, Answer.DENY_REQUEST):
        return ""
    offered = deny if answer == Answer.DENY else allow
    if chosen is None:
        if not offered:
            raise ValueError(PATTERN_NOT_OFFERED.format(pattern="A pattern"))
        return offered[0]
    if chosen not in offered:
        shown = repr(chosen) if chosen else "The whole tool"
        raise ValueError(PATTERN_NOT_OFFERED.format(pattern=shown))
    return chosen


def abort_pattern(subject: str | None) -> str:
    """S9 for a tool call (U3): the pattern an abort's session DENY carries — the call's exact
    subject where it can be written as a pattern, else the whole tool (a wider Deny)."""
    if subject and not subject_pattern_problems(subject):
        return subject
    return ""
