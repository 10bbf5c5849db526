"""Part S of docs/rules.md as pure functions: tables of cases, no database.

Expected outcomes are written out by hand from the rules (or computed by a reference
written independently of the code under test), so a change to a rule fails a row.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aimon_admin.approvals.choices import (
    Answer,
    DecisionSource,
    GrantDecision,
    GrantScope,
    RuleAction,
    SkillDecision,
)
from aimon_admin.approvals.policy import (
    AnswerNotOffered,
    GrantTarget,
    Holder,
    Layers,
    RequestShape,
    RuleIndex,
    RuleSpec,
    abort_target,
    answers_offered,
    chain_decide,
    effective_principal,
    grant_for_answer,
    may_answer,
    may_grant_agent_scope,
    scope_within,
    stores_nothing,
)
from tests.fuzzing import budget

G_ALLOW, G_DENY = GrantDecision.ALLOW, GrantDecision.DENY
R_ALLOW, R_DENY, R_ASK = RuleAction.ALLOW, RuleAction.DENY, RuleAction.ASK
ALLOW, DENY, ASK = SkillDecision.ALLOW, SkillDecision.DENY, SkillDecision.ASK
TURN_SRC, SESSION_SRC = DecisionSource.TURN, DecisionSource.SESSION
INVOKING_SRC, AGENT_SRC = DecisionSource.INVOKING_SESSION, DecisionSource.AGENT
RULE_SRC, DEFAULT_SRC = DecisionSource.RULE, DecisionSource.DEFAULT
TURN, SESSION, AGENT = GrantScope.TURN, GrantScope.SESSION, GrantScope.AGENT
ONCE, FOR_SESSION, ALWAYS, NO = Answer.ALLOW_ONCE, Answer.ALLOW_SESSION, Answer.ALLOW_AGENT, Answer.DENY
DENY_REQUEST = Answer.DENY_REQUEST

GRANT_VALUES = (None, G_ALLOW, G_DENY)
RULE_VALUES = (None, R_ALLOW, R_DENY, R_ASK)


# --- The chain (S2, S3) -------------------------------------------------------------------------

# (turn, session, invoking_session, agent, rule) -> (decision, source), written out by hand.
CHAIN_TABLE = [
    # Nothing anywhere: the default is to ask.
    ((None, None, None, None, None), (ASK, DEFAULT_SRC)),
    # Each layer alone answers for itself.
    ((G_ALLOW, None, None, None, None), (ALLOW, TURN_SRC)),
    ((None, G_ALLOW, None, None, None), (ALLOW, SESSION_SRC)),
    ((None, G_DENY, None, None, None), (DENY, SESSION_SRC)),
    ((None, None, G_ALLOW, None, None), (ALLOW, INVOKING_SRC)),
    ((None, None, G_DENY, None, None), (DENY, INVOKING_SRC)),
    ((None, None, None, G_ALLOW, None), (ALLOW, AGENT_SRC)),
    ((None, None, None, G_DENY, None), (DENY, AGENT_SRC)),
    ((None, None, None, None, R_ALLOW), (ALLOW, RULE_SRC)),
    ((None, None, None, None, R_DENY), (DENY, RULE_SRC)),
    ((None, None, None, None, R_ASK), (ASK, RULE_SRC)),
    # S2: a session DENY made now beats an older agent-wide ALLOW.
    ((None, G_DENY, None, G_ALLOW, None), (DENY, SESSION_SRC)),
    ((None, G_DENY, None, G_ALLOW, R_ALLOW), (DENY, SESSION_SRC)),
    # S3: a fork inherits its invoking session's denial over an agent ALLOW and an ALLOW rule.
    ((None, None, G_DENY, G_ALLOW, R_ALLOW), (DENY, INVOKING_SRC)),
    # S3: session_id is looked up before invoking_session_id.
    ((None, G_ALLOW, G_DENY, None, None), (ALLOW, SESSION_SRC)),
    ((None, G_DENY, G_ALLOW, None, None), (DENY, SESSION_SRC)),
    # The turn is the narrowest of all.
    ((G_ALLOW, G_DENY, G_DENY, G_DENY, R_DENY), (ALLOW, TURN_SRC)),
    ((G_DENY, G_ALLOW, None, G_ALLOW, R_ALLOW), (DENY, TURN_SRC)),
    # Any grant beats a rule; a rule beats the default.
    ((None, None, None, G_ALLOW, R_DENY), (ALLOW, AGENT_SRC)),
    ((None, None, None, G_DENY, R_ALLOW), (DENY, AGENT_SRC)),
    ((None, None, G_ALLOW, None, R_ASK), (ALLOW, INVOKING_SRC)),
    ((None, G_ALLOW, None, None, R_DENY), (ALLOW, SESSION_SRC)),
]


@pytest.mark.parametrize(("held", "expected"), CHAIN_TABLE)
def test_chain_decide_table(held: tuple, expected: tuple) -> None:  # S2, S3
    turn, session, invoking, agent, rule = held
    layers = Layers(turn=turn, session=session, invoking_session=invoking, agent=agent, rule=rule)
    assert chain_decide(layers) == expected


def reference_chain(turn, session, invoking, agent, rule) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """S2 written a second way: rank every concrete answer by narrowness, take the narrowest."""
    ranked = {
        0: (turn, "TURN"),
        1: (session, "SESSION"),
        2: (invoking, "INVOKING_SESSION"),
        3: (agent, "AGENT"),
    }
    concrete = sorted(rank for rank, (value, _) in ranked.items() if value in ("ALLOW", "DENY"))
    if concrete:
        value, source = ranked[concrete[0]]
        return str(value), source
    if rule in ("ALLOW", "DENY", "ASK"):
        return str(rule), "RULE"
    return "ASK", "DEFAULT"


ALL_LAYERS = list(itertools.product(GRANT_VALUES, GRANT_VALUES, GRANT_VALUES, GRANT_VALUES, RULE_VALUES))


def test_every_combination_of_the_five_layers_matches_the_reference() -> None:  # S2
    assert len(ALL_LAYERS) == 3**4 * 4
    for turn, session, invoking, agent, rule in ALL_LAYERS:
        decision, source = chain_decide(
            Layers(turn=turn, session=session, invoking_session=invoking, agent=agent, rule=rule)
        )
        assert (str(decision), str(source)) == reference_chain(turn, session, invoking, agent, rule), (
            turn,
            session,
            invoking,
            agent,
            rule,
        )


def test_session_deny_beats_agent_allow_in_every_combination() -> None:  # S2
    for invoking, rule in itertools.product(GRANT_VALUES, RULE_VALUES):
        layers = Layers(session=G_DENY, invoking_session=invoking, agent=G_ALLOW, rule=rule)
        assert chain_decide(layers) == (DENY, SESSION_SRC)


def test_a_fork_reads_its_invoking_sessions_denials_as_well_as_approvals() -> None:  # S3
    for agent, rule in itertools.product(GRANT_VALUES, RULE_VALUES):
        assert chain_decide(Layers(invoking_session=G_DENY, agent=agent, rule=rule)) == (DENY, INVOKING_SRC)
        assert chain_decide(Layers(invoking_session=G_ALLOW, agent=agent, rule=rule)) == (
            ALLOW,
            INVOKING_SRC,
        )


def test_nothing_is_allow_without_an_allow_somewhere() -> None:  # S11
    for turn, session, invoking, agent, rule in ALL_LAYERS:
        decision, _ = chain_decide(
            Layers(turn=turn, session=session, invoking_session=invoking, agent=agent, rule=rule)
        )
        if decision == ALLOW:
            assert "ALLOW" in {turn, session, invoking, agent, rule}


# --- What an answer reaches (S4, S6, S9) ----------------------------------------------------------

# (has_session, has_invoking_session, has_turn)
SHAPES = list(itertools.product((True, False), repeat=3))


def shape(has_session: bool, has_invoking: bool, has_turn: bool) -> RequestShape:
    return RequestShape(has_session=has_session, has_invoking_session=has_invoking, has_turn=has_turn)


S_HOLD, I_HOLD, A_HOLD = Holder.SESSION, Holder.INVOKING_SESSION, Holder.AGENT
NOT_OFFERED = "not offered"

# answer -> {shape: expected target}, written out per shape.
GRANT_TABLE: dict[Answer, dict[tuple[bool, bool, bool], GrantTarget | str]] = {
    ONCE: {
        (True, True, True): GrantTarget(TURN, G_ALLOW, S_HOLD),
        (True, False, True): GrantTarget(TURN, G_ALLOW, S_HOLD),
        (False, True, True): GrantTarget(TURN, G_ALLOW, I_HOLD),  # a fork's turn of its invoking session
        (False, False, True): NOT_OFFERED,  # a turn of no session
        (True, True, False): NOT_OFFERED,  # no turn
        (True, False, False): NOT_OFFERED,
        (False, True, False): NOT_OFFERED,
        (False, False, False): NOT_OFFERED,
    },
    FOR_SESSION: {
        (True, True, True): GrantTarget(SESSION, G_ALLOW, S_HOLD),
        (True, True, False): GrantTarget(SESSION, G_ALLOW, S_HOLD),
        (True, False, True): GrantTarget(SESSION, G_ALLOW, S_HOLD),
        (True, False, False): GrantTarget(SESSION, G_ALLOW, S_HOLD),
        (False, True, True): GrantTarget(SESSION, G_ALLOW, I_HOLD),  # S4: lands on the invoking session
        (False, True, False): GrantTarget(SESSION, G_ALLOW, I_HOLD),
        (False, False, True): GrantTarget(AGENT, G_ALLOW, A_HOLD, escalated=True),  # S6
        (False, False, False): GrantTarget(AGENT, G_ALLOW, A_HOLD, escalated=True),  # S6
    },
    NO: {
        (True, True, True): GrantTarget(SESSION, G_DENY, S_HOLD),
        (True, True, False): GrantTarget(SESSION, G_DENY, S_HOLD),
        (True, False, True): GrantTarget(SESSION, G_DENY, S_HOLD),
        (True, False, False): GrantTarget(SESSION, G_DENY, S_HOLD),
        (False, True, True): GrantTarget(SESSION, G_DENY, I_HOLD),
        (False, True, False): GrantTarget(SESSION, G_DENY, I_HOLD),
        (False, False, True): GrantTarget(AGENT, G_DENY, A_HOLD, escalated=True),  # S6
        (False, False, False): GrantTarget(AGENT, G_DENY, A_HOLD, escalated=True),  # S6
    },
    ALWAYS: {key: GrantTarget(AGENT, G_ALLOW, A_HOLD) for key in SHAPES},  # S4: never "escalated"
    # S13: Deny this request writes no grant anywhere.
    Answer.DENY_REQUEST: dict.fromkeys(SHAPES, NOT_OFFERED),
    # U3, U4: Allow this call writes no grant either: the request's digest is the approval.
    Answer.ALLOW_CALL: dict.fromkeys(SHAPES, NOT_OFFERED),
}


@pytest.mark.parametrize(
    ("answer", "key"), [(answer, key) for answer in GRANT_TABLE for key in SHAPES], ids=str
)
def test_grant_for_answer_table(answer: Answer, key: tuple[bool, bool, bool]) -> None:  # S4, S6
    expected = GRANT_TABLE[answer][key]
    if expected == NOT_OFFERED:
        why = (
            "writes no grant"
            if answer in (Answer.DENY_REQUEST, Answer.ALLOW_CALL)
            else "Allow once needs a turn of a session"
        )
        with pytest.raises(AnswerNotOffered, match=why):
            grant_for_answer(answer, shape(*key))
    else:
        assert grant_for_answer(answer, shape(*key)) == expected
        assert grant_for_answer(answer.value, shape(*key)) == expected  # the stored string works too


def test_the_table_covers_every_answer() -> None:
    assert set(GRANT_TABLE) == set(Answer)


def test_only_a_session_answer_with_no_session_escalates() -> None:  # S6
    for answer, key in itertools.product(Answer, SHAPES):
        try:
            target = grant_for_answer(answer, shape(*key))
        except AnswerNotOffered:
            continue
        escalating = answer in (FOR_SESSION, NO) and not key[0] and not key[1]
        assert target.escalated is escalating
        assert shape(*key).escalates is (not key[0] and not key[1])


ABORT_TABLE = {
    (True, True, True): GrantTarget(SESSION, G_DENY, S_HOLD),
    (True, True, False): GrantTarget(SESSION, G_DENY, S_HOLD),
    (True, False, True): GrantTarget(SESSION, G_DENY, S_HOLD),
    (True, False, False): GrantTarget(SESSION, G_DENY, S_HOLD),
    (False, True, True): GrantTarget(SESSION, G_DENY, I_HOLD),
    (False, True, False): GrantTarget(SESSION, G_DENY, I_HOLD),
    (False, False, True): None,  # nowhere to hold it: the skill stays ASK
    (False, False, False): None,
}


@pytest.mark.parametrize("key", SHAPES, ids=str)
def test_abort_target_is_a_session_deny_and_never_agent_wide(key: tuple[bool, bool, bool]) -> None:  # S9
    target = abort_target(shape(*key))
    assert target == ABORT_TABLE[key]
    if target is not None:
        assert target.scope != AGENT
        assert target.holder != A_HOLD
        assert not target.escalated


# --- The buttons offered (S4, S5, S13; labels from docs/concepts.md) ------------------------------


def test_the_labels_read_exactly_as_the_docs_and_s13_say() -> None:
    assert {answer: answer.label for answer in Answer} == {
        ONCE: "Allow once",
        FOR_SESSION: "Allow for this session",
        ALWAYS: "Always allow for this agent",
        NO: "Deny",
        Answer.DENY_REQUEST: "Deny this request",  # S13
        Answer.ALLOW_CALL: "Allow this call",  # U3
    }


# (has_session, has_invoking, has_turn, may_grant_agent, widest_scope) -> offered, by hand.
OFFERED_TABLE = [
    # An ordinary session request with a turn, for an approver and for an operator.
    ((True, False, True, False, AGENT), [ONCE, FOR_SESSION, NO]),
    ((True, False, True, True, AGENT), [ONCE, FOR_SESSION, ALWAYS, NO]),
    # No turn: no Allow once.
    ((True, False, False, True, AGENT), [FOR_SESSION, ALWAYS, NO]),
    ((True, True, False, False, AGENT), [FOR_SESSION, NO]),
    # A fork: its answers land on the invoking session; Allow once on the invoking turn.
    ((False, True, True, False, AGENT), [ONCE, FOR_SESSION, NO]),
    ((False, True, False, True, AGENT), [FOR_SESSION, ALWAYS, NO]),
    # S6 escalation: Allow for this session (and Deny) would become agent-wide, so for
    # someone who may not grant agent scope only Deny this request is left (S13: nothing
    # stored); a turn of no session offers no Allow once.
    ((False, False, True, False, AGENT), [DENY_REQUEST]),
    ((False, False, False, False, AGENT), [DENY_REQUEST]),
    ((False, False, True, True, AGENT), [FOR_SESSION, ALWAYS, NO]),
    ((False, False, False, True, AGENT), [FOR_SESSION, ALWAYS, NO]),
    # A rule caps the widest scope at SESSION: no Always allow, and no escalating session
    # answer — Deny included (S13: caps bind Deny too).
    ((True, False, True, True, SESSION), [ONCE, FOR_SESSION, NO]),
    ((False, True, False, True, SESSION), [FOR_SESSION, NO]),
    ((False, False, False, True, SESSION), [DENY_REQUEST]),
    # ... at TURN: only Allow once (with a turn) and Deny this request (a session Deny is wider).
    ((True, False, True, True, TURN), [ONCE, DENY_REQUEST]),
    ((True, False, False, True, TURN), [DENY_REQUEST]),
    ((False, True, True, False, TURN), [ONCE, DENY_REQUEST]),
    ((False, False, True, True, TURN), [DENY_REQUEST]),
]


@pytest.mark.parametrize(("case", "expected"), OFFERED_TABLE, ids=str)
def test_answers_offered_table(case: tuple, expected: list[Answer]) -> None:  # S4, S6, S13
    has_session, has_invoking, has_turn, may_grant_agent, widest = case
    offered = answers_offered(
        shape(has_session, has_invoking, has_turn), may_grant_agent=may_grant_agent, widest_scope=widest
    )
    assert offered == expected


def reference_offered(key: tuple[bool, bool, bool], may_grant_agent: bool, widest: str) -> list[Answer]:
    """The rules of answers_offered() read straight off S4/S6/S13 and docs/concepts.md."""
    has_session, has_invoking, has_turn = key
    width = {"TURN": 0, "SESSION": 1, "AGENT": 2}[widest]
    session_held = has_session or has_invoking
    out = []
    if has_turn and session_held:
        out.append(ONCE)
    if session_held and width >= 1:
        out.append(FOR_SESSION)
    if not session_held and may_grant_agent and width >= 2:
        out.append(FOR_SESSION)  # escalates to agent-wide: only for those who may grant it
    if may_grant_agent and width >= 2:
        out.append(ALWAYS)
    # S13: a Deny reaches as far as a session answer would; where that is beyond the cap or
    # beyond what this person may give, only Deny this request (nothing stored).
    deny_reach = 1 if session_held else 2
    deny_ok = width >= deny_reach and (session_held or may_grant_agent)
    out.append(NO if deny_ok else DENY_REQUEST)
    return out


def test_answers_offered_matches_the_reference_everywhere() -> None:  # S4, S6, S13
    for key, may_grant_agent, widest in itertools.product(SHAPES, (True, False), GrantScope):
        offered = answers_offered(shape(*key), may_grant_agent=may_grant_agent, widest_scope=widest)
        assert offered == reference_offered(key, may_grant_agent, widest), (key, may_grant_agent, widest)


def test_every_offered_answer_stays_within_its_caps_deny_included() -> None:  # S4, S6, S13
    for key, may_grant_agent, widest in itertools.product(SHAPES, (True, False), GrantScope):
        offered = answers_offered(shape(*key), may_grant_agent=may_grant_agent, widest_scope=widest)
        for answer in offered:
            if answer == DENY_REQUEST:
                continue  # stores nothing
            target = grant_for_answer(answer, shape(*key))  # never raises AnswerNotOffered
            assert scope_within(target.scope, widest)  # S13: caps bind Deny too
            if target.scope == AGENT:
                assert may_grant_agent  # S13: standing effect only from operators and the owner
        # Whoever may answer can always refuse, exactly one way.
        assert (NO in offered) != (DENY_REQUEST in offered)


def test_deny_this_request_stores_nothing() -> None:  # S13
    assert stores_nothing(DENY_REQUEST)
    assert not any(stores_nothing(a) for a in Answer if a != DENY_REQUEST)


def test_scope_within_orders_turn_session_agent() -> None:
    assert [(a, b) for a, b in itertools.product(GrantScope, repeat=2) if scope_within(a, b)] == [
        (TURN, TURN),
        (TURN, SESSION),
        (TURN, AGENT),
        (SESSION, SESSION),
        (SESSION, AGENT),
        (AGENT, AGENT),
    ]


# --- Who may answer (S13) -------------------------------------------------------------------------

PRINCIPAL_TABLE = [
    (("alice", "bob", "carol"), "alice"),  # the request's own
    ((None, "bob", "carol"), "bob"),  # else its session's
    (("", "", "carol"), "carol"),  # else its invoking session's
    ((None, None, None), None),
    (("", "", ""), None),
]


@pytest.mark.parametrize(("principals", "expected"), PRINCIPAL_TABLE)
def test_effective_principal(principals: tuple, expected: str | None) -> None:  # S13
    assert effective_principal(*principals) == expected


# (username, is_operator, is_owner, principal, principal_is_user) -> may answer
MAY_ANSWER_TABLE = [
    (("alice", False, False, "alice", True), True),  # the principal answers their own
    (("bob", False, False, "alice", True), False),  # another approver does not
    (("bob", False, True, "alice", True), False),  # nor the owner, when a principal is named
    (("olivia", True, False, "alice", True), True),  # operators answer all
    (("olivia", True, False, None, False), True),
    (("owen", False, True, None, False), True),  # no principal: the runtime's owner
    (("bob", False, False, None, False), False),  # ... and nobody else but operators
    (("owen", False, True, "ghost", False), True),  # a principal naming nobody here: as above
    (("bob", False, False, "ghost", False), False),
    (("ghost", False, False, "ghost", False), False),
]


@pytest.mark.parametrize(("case", "expected"), MAY_ANSWER_TABLE, ids=str)
def test_may_answer_table(case: tuple, expected: bool) -> None:  # S13
    username, is_operator, is_owner, principal, principal_is_user = case
    assert (
        may_answer(
            username=username,
            is_operator=is_operator,
            is_owner=is_owner,
            principal=principal,
            principal_is_user=principal_is_user,
        )
        is expected
    )


@pytest.mark.parametrize(
    ("is_operator", "is_owner", "expected"),
    [(True, False, True), (False, True, True), (True, True, True), (False, False, False)],
)
def test_only_operators_and_the_owner_grant_agent_scope(
    is_operator: bool, is_owner: bool, expected: bool
) -> None:  # S13
    assert may_grant_agent_scope(is_operator=is_operator, is_owner=is_owner) is expected


# --- Skill rules -----------------------------------------------------------------------------------

RT, OTHER_RT = 1, 2


def rule(id_: int, pattern: str, action: RuleAction, runtime_id: int | None = None) -> RuleSpec:
    return RuleSpec(id=id_, runtime_id=runtime_id, pattern=pattern, action=action, widest_scope=AGENT)


def brute_force(rules: list[RuleSpec], runtime_id: int, skill: str) -> RuleSpec | None:
    """Every rule read, in the precedence order written out a second way."""
    import fnmatch

    def applies(spec: RuleSpec) -> bool:
        if spec.runtime_id not in (None, runtime_id):
            return False
        if not any(c in spec.pattern for c in "*?["):
            return spec.pattern == skill
        return fnmatch.fnmatchcase(skill, spec.pattern)

    def literal(spec: RuleSpec) -> str:
        out = ""
        for char in spec.pattern:
            if char in "*?[":
                break
            out += char
        return out

    def key(spec: RuleSpec) -> tuple:
        exact = not any(c in spec.pattern for c in "*?[")
        severity = {"DENY": 0, "ASK": 1, "ALLOW": 2}[spec.action]
        return (not exact, -len(literal(spec)), spec.runtime_id is None, severity, spec.id)

    matching = sorted((spec for spec in rules if applies(spec)), key=key)
    return matching[0] if matching else None


@pytest.mark.parametrize(
    ("rules", "skill", "winner"),
    [
        # An exact rule beats any glob, even a runtime-specific one with the same text before it.
        ([rule(1, "deploy*", R_DENY, RT), rule(2, "deploy", R_ALLOW)], "deploy", 2),
        # A longer literal prefix beats a shorter one, whatever the runtime or action.
        ([rule(1, "*", R_DENY, RT), rule(2, "dep*", R_ASK), rule(3, "deploy-*", R_ALLOW)], "deploy-x", 3),
        ([rule(1, "deploy-*", R_ALLOW), rule(2, "deploy-p*", R_ALLOW)], "deploy-prod", 2),
        # At the same prefix, a runtime-specific rule beats a global one.
        ([rule(1, "deploy*", R_DENY), rule(2, "deploy*", R_ALLOW, RT)], "deploy-x", 2),
        ([rule(1, "deploy", R_DENY), rule(2, "deploy", R_ALLOW, RT)], "deploy", 2),
        # Then the stricter action: DENY over ASK over ALLOW.
        (
            [rule(1, "deploy?", R_ALLOW), rule(2, "deploy*", R_ASK), rule(3, "deploy[xy]", R_DENY)],
            "deployx",
            3,
        ),
        ([rule(1, "deploy?", R_ALLOW), rule(2, "deploy*", R_ASK)], "deployx", 2),
        # Then the older rule.
        ([rule(7, "de*y", R_ASK), rule(3, "de*", R_ASK)], "deploy", 3),
        ([rule(3, "de*y", R_ASK), rule(7, "de*", R_ASK)], "deploy", 3),
        # Another runtime's rule never applies.
        ([rule(1, "deploy", R_DENY, OTHER_RT), rule(2, "*", R_ALLOW)], "deploy", 2),
        ([rule(1, "deploy", R_DENY, OTHER_RT)], "deploy", None),
        # Exact means equal, case and all; a glob must match the whole name.
        ([rule(1, "Deploy", R_DENY), rule(2, "dep", R_DENY)], "deploy", None),
        ([rule(1, "dep*x", R_DENY)], "deploy", None),
    ],
)
def test_rule_index_precedence(rules: list[RuleSpec], skill: str, winner: int | None) -> None:
    found = RuleIndex(rules).lookup(RT, skill)
    assert (found.id if found else None) == winner
    assert found == brute_force(rules, RT, skill)


ALPHABET = "ab-"
pattern_strategy = st.text(alphabet=ALPHABET + "*?", min_size=0, max_size=5) | st.builds(
    lambda a, b: f"{a}[{b}]", st.text(alphabet=ALPHABET, max_size=3), st.text(alphabet=ALPHABET, min_size=1)
)
rules_strategy = st.lists(
    st.tuples(
        pattern_strategy.filter(bool),
        st.sampled_from(list(RuleAction)),
        st.sampled_from([None, RT, OTHER_RT]),
    ),
    max_size=30,
    unique_by=lambda r: (r[0], r[2]),  # the database's uniqueness: pattern per runtime, and global
)


@budget(300)
@given(rules_strategy, st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=6), min_size=1, max_size=10))
def test_rule_index_agrees_with_brute_force(raw: list[tuple], skills: list[str]) -> None:
    specs = [rule(n, pattern, action, runtime_id) for n, (pattern, action, runtime_id) in enumerate(raw, 1)]
    random.Random(len(specs)).shuffle(specs)  # noqa: S311 - insertion order must not matter
    index = RuleIndex(specs)
    for skill in skills:
        for runtime_id in (RT, OTHER_RT, 3):
            assert index.lookup(runtime_id, skill) == brute_force(specs, runtime_id, skill), (
                skill,
                runtime_id,
            )


def thousand_rules() -> list[RuleSpec]:
    rng = random.Random(20240601)  # noqa: S311 - a fixed, repeatable mix
    words = ["deploy", "notify", "read", "write", "wipe", "git", "db", "mail", "ssh", "s3"]
    specs, seen = [], set()
    while len(specs) < 1000:
        word = rng.choice(words)
        cut = rng.randint(0, len(word))
        tail = rng.choice(["", "*", "?", "-*", "-[a-c]*", f"-{rng.randint(0, 99)}", f"-{rng.randint(0, 9)}*"])
        pattern = word[:cut] + tail if tail else word
        runtime_id = rng.choice([None, RT, OTHER_RT])
        if not pattern or (pattern, runtime_id) in seen:
            continue
        seen.add((pattern, runtime_id))
        specs.append(rule(len(specs) + 1, pattern, rng.choice(list(RuleAction)), runtime_id))
    return specs


def test_a_thousand_rules_lookup_agrees_with_brute_force_and_reads_only_matching_buckets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    specs = thousand_rules()
    index = RuleIndex(specs)
    rng = random.Random(7)  # noqa: S311
    skills = [f"{w}-{rng.randint(0, 99)}" for w in ("deploy", "notify", "wipe", "git", "zzz")] + [
        "deploy",
        "s3",
        "ssh-a1",
        "",
    ]
    # A spy (the real method still answers): which rules does a lookup examine?
    examined: list[RuleSpec] = []
    real_matches = RuleSpec.matches

    def spy(self: RuleSpec, skill: str) -> bool:
        examined.append(self)
        return real_matches(self, skill)

    monkeypatch.setattr(RuleSpec, "matches", spy)
    for skill in skills:
        for runtime_id in (RT, OTHER_RT):
            examined.clear()
            assert index.lookup(runtime_id, skill) == brute_force(specs, runtime_id, skill)
            # Only rules whose literal prefix starts the skill name are ever looked at.
            assert all(skill.startswith(spec.literal_prefix) for spec in examined), skill
            assert len(examined) < len(specs) / 4


# S2 (rules layer): the index remembers answers; a remembered answer is the search's own.
def test_rule_index_remembers_answers_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = thousand_rules()
    index = RuleIndex(specs)
    index.ANSWERS_KEPT = 5  # type: ignore[misc]
    searched: list[tuple[int, str]] = []
    real_find = RuleIndex.find

    def spy(self: RuleIndex, runtime_id: int, skill: str) -> RuleSpec | None:
        searched.append((runtime_id, skill))
        return real_find(self, runtime_id, skill)

    monkeypatch.setattr(RuleIndex, "find", spy)
    skills = [f"deploy-{n}" for n in range(12)]
    for _ in range(3):
        for skill in skills:
            assert index.lookup(RT, skill) == brute_force(specs, RT, skill)
    assert len(index._answers) <= 5  # bounded, whatever is asked
    assert index.lookup(RT, "deploy-11") == brute_force(specs, RT, "deploy-11")
    searched.clear()
    index.lookup(RT, "deploy-11")
    assert searched == []  # asked again at once: answered from memory
