"""Part S of docs/rules.md as pure functions: the decision chain, what an answer reaches, who
may answer, and how skill rules match. Standard library and enums only.
"""

from __future__ import annotations

import datetime as dt
import enum
import fnmatch
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from aimon_admin.approvals.choices import (
    Answer,
    DecisionSource,
    GrantDecision,
    GrantScope,
    RuleAction,
    SkillDecision,
)

# --- The chain (S2, S3) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Layers:
    """What each store holds for one skill; None where it holds nothing in force."""

    turn: GrantDecision | None = None
    session: GrantDecision | None = None
    invoking_session: GrantDecision | None = None
    agent: GrantDecision | None = None
    rule: RuleAction | None = None


def chain_decide(layers: Layers) -> tuple[SkillDecision, DecisionSource]:
    """S2: narrowest first; the first concrete ALLOW or DENY wins, else the rule, else ASK.

    A session DENY made now therefore beats an older agent-wide ALLOW, and a fork reads
    its invoking session's denials as well as its approvals (S3).
    """
    for held, source in (
        (layers.turn, DecisionSource.TURN),
        (layers.session, DecisionSource.SESSION),
        (layers.invoking_session, DecisionSource.INVOKING_SESSION),
        (layers.agent, DecisionSource.AGENT),
    ):
        if held is not None:
            return SkillDecision(held), source
    if layers.rule is not None:
        return SkillDecision(layers.rule), DecisionSource.RULE
    return SkillDecision.ASK, DecisionSource.DEFAULT


# --- What an answer reaches (S4, S6, S9) ---------------------------------------------------------

_SCOPE_WIDTH = {GrantScope.TURN: 0, GrantScope.SESSION: 1, GrantScope.AGENT: 2}


def scope_within(scope: GrantScope | str, widest: GrantScope | str) -> bool:
    return _SCOPE_WIDTH[GrantScope(scope)] <= _SCOPE_WIDTH[GrantScope(widest)]


class Holder:
    """Where a grant is written."""

    SESSION = "session"
    INVOKING_SESSION = "invoking_session"
    AGENT = "agent"


@dataclass(frozen=True)
class GrantTarget:
    scope: GrantScope
    decision: GrantDecision
    holder: str  # Holder.*
    escalated: bool = False


@dataclass(frozen=True)
class RequestShape:
    """The parts of a request that decide what each answer reaches."""

    has_session: bool
    has_invoking_session: bool
    has_turn: bool

    @property
    def session_holder(self) -> str | None:
        """Where a SESSION-scope grant lands: the session, else the invoking one (S4)."""
        if self.has_session:
            return Holder.SESSION
        if self.has_invoking_session:
            return Holder.INVOKING_SESSION
        return None

    @property
    def escalates(self) -> bool:
        """S6: no session to hold a session answer, so it would become agent-wide."""
        return self.session_holder is None


class AnswerNotOffered(ValueError):
    """An answer this request does not offer to this person."""


def grant_for_answer(answer: Answer | str, shape: RequestShape) -> GrantTarget:
    """S4 and S6: the grant an answer writes.

    Allow once → TURN ALLOW on the turn's session; Allow for this session → SESSION
    ALLOW (a fork's lands on its invoking session); Deny → SESSION DENY likewise;
    Always allow → AGENT ALLOW. A session answer with no session at all is written to
    the agent store and marked escalated.
    """
    answer = Answer(answer)
    if answer == Answer.DENY_REQUEST:
        raise AnswerNotOffered("Deny this request writes no grant")
    if answer == Answer.ALLOW_CALL:
        raise AnswerNotOffered("Allow this call writes no grant: the request's digest is the approval (U4)")
    if answer == Answer.ALLOW_AGENT:
        return GrantTarget(GrantScope.AGENT, GrantDecision.ALLOW, Holder.AGENT)
    holder = shape.session_holder
    if answer == Answer.ALLOW_ONCE:
        if not shape.has_turn or holder is None:
            raise AnswerNotOffered("Allow once needs a turn of a session")
        return GrantTarget(GrantScope.TURN, GrantDecision.ALLOW, holder)
    decision = GrantDecision.ALLOW if answer == Answer.ALLOW_SESSION else GrantDecision.DENY
    if holder is None:
        return GrantTarget(GrantScope.AGENT, decision, Holder.AGENT, escalated=True)
    return GrantTarget(GrantScope.SESSION, decision, holder)


def abort_target(shape: RequestShape) -> GrantTarget | None:
    """S9: an aborted request denies each unanswered skill for the session, never agent-wide.

    With no session at all there is nowhere to write it: the skill stays ASK, which an
    unattended execution refuses anyway.
    """
    holder = shape.session_holder
    return None if holder is None else GrantTarget(GrantScope.SESSION, GrantDecision.DENY, holder)


def answers_offered(
    shape: RequestShape, *, may_grant_agent: bool, widest_scope: GrantScope | str
) -> list[Answer]:
    """The buttons a person sees for one skill; the server refuses any other answer.

    - Allow once: only with a turn of a session.
    - Allow for this session: unless it would escalate to agent-wide (S6) for someone
      who may not grant agent scope, or a rule caps the skill below what it would reach.
    - Always allow for this agent: operators and the runtime's owner only (S13), and
      only where no rule caps the skill below AGENT.
    - Deny: where a session Deny is within the rule's cap and, when it would escalate to
      agent-wide (S6), only for operators and the runtime's owner (S13: an answer with
      standing effect beyond one session, Deny included). Everyone else gets
      *Deny this request* instead: the runtime is told DENY for this request, nothing
      is stored. So a person who may answer can always refuse.
    """
    offered: list[Answer] = []
    if shape.has_turn and shape.session_holder is not None:
        offered.append(Answer.ALLOW_ONCE)
    session_reach = GrantScope.AGENT if shape.escalates else GrantScope.SESSION
    session_answer_ok = scope_within(session_reach, widest_scope) and (not shape.escalates or may_grant_agent)
    if session_answer_ok:
        offered.append(Answer.ALLOW_SESSION)
    if may_grant_agent and scope_within(GrantScope.AGENT, widest_scope):
        offered.append(Answer.ALLOW_AGENT)
    offered.append(Answer.DENY if session_answer_ok else Answer.DENY_REQUEST)
    return offered


def stores_nothing(answer: Answer | str) -> bool:
    """S13: *Deny this request* answers one request and writes no grant anywhere."""
    return Answer(answer) == Answer.DENY_REQUEST


# --- Who may answer (S13) ----------------------------------------------------------------------


def effective_principal(
    request_principal: str | None, session_principal: str | None, invoking_principal: str | None
) -> str | None:
    """A request belongs to its own principal, else its session's, else its invoking one's."""
    return request_principal or session_principal or invoking_principal or None


def may_answer(
    *,
    username: str,
    is_operator: bool,
    is_owner: bool,
    principal: str | None,
    principal_is_user: bool,
) -> bool:
    """S13: the principal answers their own; operators answer all; a request with no
    principal (or one naming nobody here) goes to operators and the runtime's owner."""
    if is_operator:
        return True
    if principal and principal_is_user:
        return username == principal
    return is_owner


def may_grant_agent_scope(*, is_operator: bool, is_owner: bool) -> bool:
    """S13: agent scope is granted only by operators and the runtime's owner."""
    return is_operator or is_owner


# --- Undo of an answer (S14) ---------------------------------------------------------------------

# How long the inbox keeps a line for a request its reader's answer closed, and so how long
# that person may undo an allow it wrote.
JUST_ANSWERED_FOR = dt.timedelta(minutes=10)


class UndoRefusal(enum.Enum):
    """Why an answer's grant cannot be undone by this person now (S14)."""

    NOT_THEIRS = "not_theirs"  # another person's answer, or no person's (a rule's, an abort's)
    DENY = "deny"  # a deny is final: the agent has been told no
    TOO_LATE = "too_late"  # past JUST_ANSWERED_FOR


def undo_refusal(
    *, decision: GrantDecision | str, given_by_them: bool, from_answer: bool, age: dt.timedelta
) -> UndoRefusal | None:
    """S14: the person who gave an allow may take it back, for a short while after. It is a
    revoke of that grant, nothing more: what the agent already did with the allow stays done.
    A deny is not undone here: the agent was told no and acted on it, and taking a deny back
    loosens what holds (the session's page revokes it, with its confirmation)."""
    if not (given_by_them and from_answer):
        return UndoRefusal.NOT_THEIRS
    if GrantDecision(decision) != GrantDecision.ALLOW:
        return UndoRefusal.DENY
    if age > JUST_ANSWERED_FOR:
        return UndoRefusal.TOO_LATE
    return None


# --- Skill rules -------------------------------------------------------------------------------

_WILDCARDS = "*?["
_SEVERITY = {RuleAction.DENY: 0, RuleAction.ASK: 1, RuleAction.ALLOW: 2}


@dataclass(frozen=True)
class RuleSpec:
    id: int
    runtime_id: int | None
    pattern: str
    action: RuleAction
    widest_scope: GrantScope
    approvers: int = 1  # P3: how many distinct people must allow what it asks about

    @property
    def literal_prefix(self) -> str:
        cut = min((self.pattern.find(c) for c in _WILDCARDS if c in self.pattern), default=-1)
        return self.pattern if cut == -1 else self.pattern[:cut]

    @property
    def is_exact(self) -> bool:
        return not any(c in self.pattern for c in _WILDCARDS)

    def matches(self, skill: str) -> bool:
        return self.pattern == skill if self.is_exact else fnmatch.fnmatchcase(skill, self.pattern)

    def precedence(self) -> tuple[int, int, int, int, int]:
        """Lower sorts first: exact, then longer literal prefix, then runtime-specific,
        then the stricter action (DENY, ASK, ALLOW), then the older rule."""
        return (
            0 if self.is_exact else 1,
            -len(self.literal_prefix),
            0 if self.runtime_id is not None else 1,
            _SEVERITY[self.action],
            self.id,
        )


class RuleIndex:
    """Skill rules indexed by literal prefix, so a lookup never scans every rule.

    A lookup touches at most one bucket per prefix of the skill name (≤ 201), each
    holding only the patterns that share that literal prefix.
    """

    ANSWERS_KEPT = 10_000

    def __init__(self, rules: Iterable[RuleSpec]) -> None:
        self._answers: dict[tuple[int, str], RuleSpec | None] = {}
        self._exact: dict[tuple[int | None, str], list[RuleSpec]] = {}
        self._by_prefix: dict[str, list[RuleSpec]] = {}
        for rule in rules:
            if rule.is_exact:
                self._exact.setdefault((rule.runtime_id, rule.pattern), []).append(rule)
            else:
                self._by_prefix.setdefault(rule.literal_prefix, []).append(rule)
        for bucket in (*self._exact.values(), *self._by_prefix.values()):
            bucket.sort(key=RuleSpec.precedence)

    def lookup(self, runtime_id: int, skill: str) -> RuleSpec | None:
        """The rule that decides `skill` for `runtime_id`, or None.

        Answers are remembered: the index never changes (a changed rule set is a new
        index), and runtimes ask about the same few skills over and over. The memory is
        bounded; past its size it starts again empty.
        """
        key = (runtime_id, skill)
        try:
            return self._answers[key]
        except KeyError:
            pass
        found = self.find(runtime_id, skill)
        if len(self._answers) >= self.ANSWERS_KEPT:
            self._answers = {}
        self._answers[key] = found
        return found

    def find(self, runtime_id: int, skill: str) -> RuleSpec | None:
        """`lookup` without its memory: the search itself."""
        candidates = [*self._exact.get((runtime_id, skill), ()), *self._exact.get((None, skill), ())]
        if candidates:
            return min(candidates, key=RuleSpec.precedence)
        for cut in range(len(skill), -1, -1):
            bucket = self._by_prefix.get(skill[:cut])
            if not bucket:
                continue
            matching = [
                rule for rule in bucket if rule.runtime_id in (None, runtime_id) and rule.matches(skill)
            ]
            if matching:
                return min(matching, key=RuleSpec.precedence)
        return None


# --- The skill-pattern grammar -------------------------------------------------------------------
#
# A pattern is 1-200 characters: letters, digits and - _ . : / @ + (the characters of skill
# names), and * (any run of characters, including none). Nothing else: no spaces, no
# brackets or ? (the matcher would read them as character classes), no runs of ** (one *
# already matches any run), no control characters. `*` alone matches every skill.

SKILL_PATTERN_MAX = 200
_PATTERN_PUNCTUATION = frozenset("-_.:/@+")

PATTERN_EMPTY_MESSAGE = "Enter a skill name or a pattern such as deploy-*."
PATTERN_TOO_LONG_MESSAGE = "At most {limit} characters; this has {length}."
PATTERN_SPACE_MESSAGE = "No spaces: skill names have none (a space at position {position})."
PATTERN_CONTROL_MESSAGE = "No control characters (one at position {position})."
PATTERN_BRACKET_MESSAGE = "No brackets or ?: only * is a wildcard here ({char} at position {position})."
PATTERN_STARS_MESSAGE = "No runs of **: one * already matches any run of characters (at position {position})."
PATTERN_CHAR_MESSAGE = (
    "{char} is not allowed (position {position}): use letters, digits, - _ . : / @ + and * only."
)
PATTERN_GRAMMAR = "Letters, digits, - _ . : / @ + and * (any run of characters); no spaces, brackets or **."


def skill_pattern_problems(pattern: str) -> list[str]:
    """What is wrong with a skill pattern, in words that name each problem; empty if none.

    One message per kind of problem, at its first position (counted from 1)."""
    if not pattern:
        return [PATTERN_EMPTY_MESSAGE]
    problems: list[str] = []
    if len(pattern) > SKILL_PATTERN_MAX:
        problems.append(PATTERN_TOO_LONG_MESSAGE.format(limit=SKILL_PATTERN_MAX, length=len(pattern)))
    seen: set[str] = set()
    for position, char in enumerate(pattern, start=1):
        if char.isascii() and (char.isalnum() or char in _PATTERN_PUNCTUATION):
            continue
        if char == "*":
            if pattern[position - 2 : position] == "**" and "stars" not in seen:
                seen.add("stars")
                problems.append(PATTERN_STARS_MESSAGE.format(position=position - 1))
            continue
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            kind, message = "control", PATTERN_CONTROL_MESSAGE.format(position=position)
        elif char.isspace():
            kind, message = "space", PATTERN_SPACE_MESSAGE.format(position=position)
        elif char in "[]?":
            kind, message = "bracket", PATTERN_BRACKET_MESSAGE.format(char=char, position=position)
        else:
            kind, message = f"char:{char}", PATTERN_CHAR_MESSAGE.format(char=repr(char), position=position)
        if kind not in seen:
            seen.add(kind)
            problems.append(message)
    return problems


def pattern_matches_everything(pattern: str) -> bool:
    """True for a (valid) pattern that matches every skill name: `*` alone."""
    return pattern == "*"


def rule_allows_everything(*, action: RuleAction | str, pattern: str) -> bool:
    """An ALLOW rule whose pattern matches every skill: saved only once confirmed."""
    return action == RuleAction.ALLOW and pattern_matches_everything(pattern)


def stored_rule_action(action: RuleAction | str, pattern: str) -> RuleAction:
    """The action the chain reads for a stored rule: an ALLOW whose pattern breaks the
    grammar (stored before it existed: `***` allowed every skill) is read as ASK until an
    operator deletes it, since nothing unsure answers ALLOW. A DENY or an ASK stays."""
    if action == RuleAction.ALLOW and skill_pattern_problems(pattern):
        return RuleAction.ASK
    return RuleAction(action)


def rule_action_for(action: RuleAction, approvers: int) -> RuleAction:
    """P3: an ALLOW that needs two or three people to allow is a question for them, never an
    answer by itself (read as ASK, so they are asked); anything else stays as it is."""
    if action == RuleAction.ALLOW and approvers > 1:
        return RuleAction.ASK
    return action


def pattern_matching(pattern: str, skills: Iterable[str]) -> list[str]:
    """Those of `skills` the pattern matches, in their order, as the rule index would match."""
    spec = RuleSpec(
        id=0, runtime_id=None, pattern=pattern, action=RuleAction.ASK, widest_scope=GrantScope.AGENT
    )
    return [skill for skill in skills if spec.matches(skill)]
