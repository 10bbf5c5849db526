"""The answers to a tool request, as pure functions (U3, S9, S13; no database): which buttons a
person sees, which patterns each answer may carry, and what an abort denies."""

from __future__ import annotations

import re

import pytest

from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.policy import RequestShape
from aimon_admin.approvals.subject_patterns import pattern_choices
from aimon_admin.approvals.tool_answers import (
    PATTERN_NOT_OFFERED,
    abort_pattern,
    answer_pattern,
    deny_patterns,
    tool_answers_offered,
)
from aimon_admin.registry.choices import DestructiveBehavior, IdempotencyBehavior, SideEffectLevel
from aimon_admin.registry.policy import UNREGISTERED, ToolAxes

CALL, SESSION, AGENT, DENY, REQUEST = (
    Answer.ALLOW_CALL,
    Answer.ALLOW_SESSION,
    Answer.ALLOW_AGENT,
    Answer.DENY,
    Answer.DENY_REQUEST,
)
EDIT = ToolAxes(SideEffectLevel.MUTATING, DestructiveBehavior.NON_DESTRUCTIVE, IdempotencyBehavior.IDEMPOTENT)
READ = ToolAxes(SideEffectLevel.READ_ONLY, DestructiveBehavior.DESTRUCTIVE)  # T5: read-only destroys nothing


@pytest.mark.parametrize(
    ("subject", "axes", "allow", "deny"),
    [
        # U3: never the whole of a destructive tool for an allow; always for a deny.
        (
            "git push origin main",
            UNREGISTERED,
            ["git push origin main", "git push origin:*", "git push:*", "git:*"],
            None,
        ),
        ("ls", UNREGISTERED, ["ls"], ["ls", ""]),
        (None, UNREGISTERED, [], [""]),
        ("", UNREGISTERED, [], [""]),
        ("notes/a.txt", EDIT, ["notes/a.txt", ""], ["notes/a.txt", ""]),
        (None, EDIT, [""], [""]),
        (None, READ, [""], [""]),
        # A subject that is no pattern (a control character, a star, too long) offers only its prefixes.
        ("rm\x07 -rf", UNREGISTERED, [], [""]),
        ("echo *", UNREGISTERED, ["echo:*"], ["echo:*", ""]),
        ("x" * 301, UNREGISTERED, [], [""]),
    ],
)
def test_the_patterns_each_answer_may_carry(
    subject: str | None, axes: ToolAxes, allow: list[str], deny: list[str] | None
) -> None:  # U3
    assert pattern_choices(subject, axes) == allow
    assert deny_patterns(subject, axes) == (deny if deny is not None else [*allow, ""])


SHAPE = RequestShape(has_session=True, has_invoking_session=False, has_turn=True)
FORK = RequestShape(has_session=False, has_invoking_session=True, has_turn=False)
NO_SESSION = RequestShape(has_session=False, has_invoking_session=False, has_turn=False)


@pytest.mark.parametrize(
    ("shape", "may_grant_agent", "patterns", "offered"),
    [
        (SHAPE, False, ["ls"], [CALL, SESSION, DENY]),  # no Allow once for a tool, even with a turn
        (SHAPE, True, ["ls"], [CALL, SESSION, AGENT, DENY]),  # S13: operators and the owner
        (SHAPE, True, [], [CALL, DENY]),  # destructive, no subject: one call at a time
        (FORK, False, ["ls"], [CALL, SESSION, DENY]),  # a fork's answers land on its invoking session
        # No session at all (never opened for a tool: T8); were it, as for a skill (S6, S13).
        (NO_SESSION, False, ["ls"], [REQUEST]),
        (NO_SESSION, True, ["ls"], [SESSION, AGENT, DENY]),
    ],
)
def test_the_buttons_of_a_tool_request(
    shape: RequestShape, may_grant_agent: bool, patterns: list[str], offered: list[Answer]
) -> None:  # U3, S13
    assert tool_answers_offered(shape, may_grant_agent=may_grant_agent, allow_patterns=patterns) == offered


ALLOW = ["git push origin main", "git push:*"]
DENYING = [*ALLOW, ""]


@pytest.mark.parametrize(
    ("answer", "chosen", "carried"),
    [
        (SESSION, None, "git push origin main"),  # none chosen: the narrowest
        (SESSION, "git push:*", "git push:*"),
        (AGENT, "git push:*", "git push:*"),
        (DENY, "", ""),  # a deny may be as wide as the tool
        (DENY, None, "git push origin main"),
        (CALL, "anything", ""),  # this call only: no pattern
        (REQUEST, "", ""),
    ],
)
def test_the_pattern_an_answer_carries(answer: Answer, chosen: str | None, carried: str) -> None:  # U3
    assert answer_pattern(answer, chosen, allow=ALLOW, deny=DENYING) == carried


@pytest.mark.parametrize(
    ("answer", "chosen"),
    [(SESSION, ""), (AGENT, ""), (SESSION, "git:*"), (DENY, "rm:*"), (SESSION, "*")],
)
def test_a_pattern_not_offered_is_refused(answer: Answer, chosen: str) -> None:  # U3
    with pytest.raises(ValueError, match="is not one of the patterns offered"):
        answer_pattern(answer, chosen, allow=ALLOW, deny=DENYING)


def test_with_nothing_offered_an_allow_is_refused() -> None:  # U3
    with pytest.raises(ValueError, match=re.escape(PATTERN_NOT_OFFERED.format(pattern="A pattern"))):
        answer_pattern(SESSION, None, allow=[], deny=[""])


@pytest.mark.parametrize(
    ("subject", "denied"),
    [
        ("git push origin main", "git push origin main"),  # S9: the exact subject
        ("rm *.txt", "rm *.txt"),  # its star then stands for anything: a wider deny, never narrower
        (None, ""),  # no subject: the whole tool
        ("", ""),
        ("a\nb", ""),  # no pattern holds a line break: the whole tool
        ("a**b", ""),
        ("x" * 301, ""),
    ],
)
def test_an_abort_denies_the_exact_subject_else_the_whole_tool(
    subject: str | None, denied: str
) -> None:  # S9
    assert abort_pattern(subject) == denied
