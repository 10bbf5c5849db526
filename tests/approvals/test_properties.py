"""Random histories of approval operations on one runtime, checked after every step.

Each example gets a fresh runtime and plays a random sequence of requests (session, fork,
session-with-invoking, no-session shapes; with or without a turn), answers by random people
with random buttons, cancels, expiries, clears, revokes, agent-wide revokes, single revokes
and rule changes. After every step the services' own reads (skills_decide, the rows) are
checked against invariants of part S (docs/rules.md), and against a small model of the stores
kept here, written from those rules rather than from the code.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from django.core.cache import cache
from django.db.models import Count
from django.utils import timezone
from hypothesis import HealthCheck, event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import Answer, GrantScope, RequestStatus, RuleAction
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant, SkillRule
from aimon_admin.approvals.services import (
    NotAllowedError,
    PrincipalConflictError,
    RequestClosedError,
    RequestInput,
    SkillCall,
    agent_grants_revoke,
    decide_for_token,
    decide_skills,
    grant_revoke,
    request_answer,
    request_cancel,
    request_create,
    request_expire_if_due,
    requests_expire_due,
    session_clear,
    session_revoke,
    skills_decide,
)
from aimon_admin.approvals.services.sessions import session_lookup, session_touch
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_create, token_issue
from tests.conftest import TEST_ACTOR
from tests.fuzzing import budget

SKILLS = ("deploy", "notify", "wipe", "read")
SESSIONS = ("s-1", "s-2")
TURNS = ("t-1", None, "t-2")
PEOPLE = ("olivia", "alice", "bob", "owen", "audrey")  # operator, approvers, the owner, an auditor
REAL_PRINCIPALS = ("alice", "bob")
AGENT_GRANTERS = ("olivia", "owen")
ONCE, FOR_SESSION, ALWAYS, NO = Answer.ALLOW_ONCE, Answer.ALLOW_SESSION, Answer.ALLOW_AGENT, Answer.DENY
DENY_REQUEST = Answer.DENY_REQUEST

# Where the chain is read after each step: (session, invoking session, turn).
PROBES = [
    ("s-1", None, None),
    ("s-2", None, None),
    ("s-1", None, "t-1"),
    (None, "s-1", None),
    (None, "s-2", None),
    (None, "s-1", "t-1"),
    ("s-2", "s-1", None),
    ("s-1", "s-2", "t-1"),
    (None, None, None),
]
FORK_PAIRS = [("s-1", None), ("s-2", None), ("s-1", "t-1")]  # (invoking session, turn) probed both ways

_names = itertools.count(1)


# --- The model: the stores as docs/rules.md describes them ----------------------------------------

GrantKey = tuple[str, str | None, str, str]  # scope, session id, turn id, skill


@dataclass
class ModelGrant:
    decision: str
    origin: str
    granted_by: str | None


@dataclass
class ModelRequest:
    pk: object
    session: str | None
    invoking: str | None
    turn: str | None
    principal: str
    items: dict[str, str | None]  # skill -> decision
    widest: dict[str, str]
    status: str = RequestStatus.PENDING

    @property
    def holder(self) -> str | None:
        """Where its session answers land (S4): the session, else the invoking one."""
        return self.session or self.invoking


@dataclass
class Model:
    principals: dict[str, str]
    grants: dict[GrantKey, ModelGrant] = field(default_factory=dict)
    rules: dict[str, tuple[str, str]] = field(default_factory=dict)  # skill -> (action, widest)
    requests: list[ModelRequest] = field(default_factory=list)

    def decide(
        self, session: str | None, invoking: str | None, turn: str | None, skill: str
    ) -> tuple[str, str]:
        """S2: turn, session, invoking session, agent, rules, ask."""
        holder = session or invoking
        layers = [
            (("TURN", holder, turn or "", skill), "TURN") if turn and holder else (None, "TURN"),
            (("SESSION", session, "", skill), "SESSION") if session else (None, "SESSION"),
            (("SESSION", invoking, "", skill), "INVOKING_SESSION")
            if invoking
            else (None, "INVOKING_SESSION"),
            (("AGENT", None, "", skill), "AGENT"),
        ]
        for key, source in layers:
            if key is not None and key in self.grants:
                return self.grants[key].decision, source
        if skill in self.rules:
            return self.rules[skill][0], "RULE"
        return "ASK", "DEFAULT"

    def may_answer(self, who: str, request: ModelRequest) -> bool:
        """S13, read straight off docs/rules.md."""
        if who == "audrey":
            return False
        if who == "olivia":
            return True
        if request.principal in REAL_PRINCIPALS:
            return who == request.principal
        return who == "owen"

    def offered(self, who: str, request: ModelRequest, widest: str) -> set[str]:
        """S4, S6, S13 and docs/concepts.md: the buttons one person sees for one skill."""
        agent_ok = who in AGENT_GRANTERS and widest == "AGENT"
        out = set()
        if request.turn and request.holder:
            out.add(ONCE)
        session_ok = bool(request.holder and widest in ("SESSION", "AGENT")) or (
            not request.holder and agent_ok
        )
        if session_ok:
            out.add(FOR_SESSION)
        if agent_ok:
            out.add(ALWAYS)
        # S13: a Deny reaches as far as a session answer; where that is not allowed, only
        # Deny this request (nothing stored).
        out.add(NO if session_ok else DENY_REQUEST)
        return out

    def write(self, answer: str, request: ModelRequest, skill: str, who: str) -> str:
        """S4, S6: where an answer lands; returns the item's decision.

        Deny this request stores nothing (S13). A key already held (another request's answer
        made while this one waited) settles it: the same decision or a DENY standing answers
        this request; a DENY replaces an ALLOW (S2: a Deny made now beats older grants)."""
        if answer == DENY_REQUEST:
            return "DENY"
        holder = request.holder
        if answer == ALWAYS:
            key, decision, origin = ("AGENT", None, "", skill), "ALLOW", "ANSWER"
        elif answer == ONCE:
            key, decision, origin = ("TURN", holder, request.turn or "", skill), "ALLOW", "ANSWER"
        else:
            decision = "ALLOW" if answer == FOR_SESSION else "DENY"
            if holder is None:
                key, origin = ("AGENT", None, "", skill), "ESCALATION"
            else:
                key, origin = ("SESSION", holder, "", skill), "ANSWER"
        held = self.grants.get(key)
        if held is not None and (held.decision == decision or held.decision == "DENY"):
            return held.decision
        self.grants[key] = ModelGrant(decision, origin, who)
        return decision

    def abort(self, request: ModelRequest, status: str) -> None:
        """S9: a SESSION DENY for each unanswered skill where a session can hold it, never AGENT."""
        request.status = status
        for skill, decision in request.items.items():
            if decision is None and request.holder is not None:
                self.grants[("SESSION", request.holder, "", skill)] = ModelGrant("DENY", "ABORT", None)
                request.items[skill] = "DENY"

    def drop(self, predicate: Callable[[GrantKey], bool]) -> int:
        gone = [key for key in self.grants if predicate(key)]
        for key in gone:
            del self.grants[key]
        return len(gone)


# --- Operations ----------------------------------------------------------------------------------

shapes = st.sampled_from(["session", "fork", "both", "none"])
create_op = st.tuples(
    st.just("create"),
    shapes,
    st.sampled_from(SESSIONS),
    st.sampled_from(TURNS),
    st.sampled_from([None, "=", "alice", "bob", "ghost"]),  # "=": the one its session already has
    st.lists(st.sampled_from(SKILLS), min_size=1, max_size=3, unique=True),
)
answer_op = st.tuples(
    st.just("answer"),
    st.integers(0, 200),
    st.sampled_from(PEOPLE),
    st.sampled_from([FOR_SESSION, NO, ONCE, ALWAYS, DENY_REQUEST]),
    st.one_of(st.none(), st.sampled_from(SKILLS)),
    # aim: 0 anyone, any button; 1 someone who may answer, any button; 2 ... a button they are offered
    st.sampled_from([2, 1, 0]),
)
BY_KIND = {
    "create": create_op,
    "answer": answer_op,
    "cancel": st.tuples(st.just("cancel"), st.integers(0, 50)),
    "expire": st.tuples(st.just("expire"), st.integers(0, 50), st.booleans()),
    "clear": st.tuples(st.just("clear"), st.sampled_from(SESSIONS)),
    "revoke": st.tuples(st.just("revoke"), st.sampled_from(SESSIONS), st.booleans()),
    "agent_revoke": st.tuples(st.just("agent_revoke")),
    "grant_revoke": st.tuples(st.just("grant_revoke"), st.integers(0, 50)),
    "rule": st.tuples(
        st.just("rule"),
        st.sampled_from(SKILLS),
        st.sampled_from([None, *RuleAction]),
        st.sampled_from(list(GrantScope)),
    ),
}


@dataclass
class World:
    runtime: AgentRuntime
    people: dict[str, User]
    model: Model
    token: str  # the runtime's, for the API's fused read (token and decision at once)

    def request_of(self, pick: int) -> ModelRequest | None:
        """Mostly a pending request (if any); one pick in eight from all of them, closed ones too."""
        pending = [r for r in self.model.requests if r.status == RequestStatus.PENDING]
        requests = pending if pending and pick % 8 else self.model.requests
        return requests[pick // 8 % len(requests)] if requests else None


def play(world: World, op: tuple) -> None:  # one branch per operation, side by side
    model, runtime, kind = world.model, world.runtime, op[0]
    agent_before = set(
        Grant.objects.active().filter(runtime=runtime, scope="AGENT").values_list("pk", flat=True)
    )
    agent_rows_before = Grant.objects.filter(runtime=runtime, scope="AGENT").count()

    if kind == "create":
        _, shape, sid, turn, principal, skills = op
        other = next(s for s in SESSIONS if s != sid)
        session, invoking = {
            "session": (sid, None),
            "fork": (None, sid),
            "both": (sid, other),
            "none": (None, None),
        }[shape]
        named = session or invoking  # a fork's principal is held to its invoking session's (S12)
        fixed = model.principals[named] if named else ""
        if principal == "=":
            principal = fixed or None
        data = RequestInput(
            runtime=runtime,
            skills=list(skills),
            session_id=session,
            invoking_session_id=invoking,
            turn_id=turn,
            principal=principal,
        )
        if principal and fixed and principal != fixed:  # S12
            event("create: principal conflict")
            with pytest.raises(PrincipalConflictError):
                request_create(data)
            return
        request, created = request_create(data)
        assert created
        if named and principal and not fixed:
            model.principals[named] = principal
        effective = principal or (model.principals[session] if session else "")
        effective = effective or (model.principals[invoking] if invoking else "")
        items: dict[str, str | None] = {}
        for skill in skills:
            decision, _ = model.decide(session, invoking, turn, skill)
            items[skill] = None if decision == "ASK" else decision
        expected = ModelRequest(
            pk=request.pk,
            session=session,
            invoking=invoking,
            turn=turn,
            principal=effective,
            items=items,
            widest={s: model.rules[s][1] if s in model.rules else "AGENT" for s in skills},
        )
        if all(items.values()):
            expected.status = RequestStatus.ANSWERED
        assert request.principal == effective  # S13: resolved at creation
        model.requests.append(expected)

    elif kind == "answer":
        _, pick, who, answer, one_skill, aim = op
        target = world.request_of(pick)
        if target is None:
            event("answer: no request yet")
            return
        request = ApprovalRequest.objects.get(pk=target.pk)
        chosen = [one_skill] if one_skill in target.items else list(target.items)
        open_skills = [s for s in chosen if target.items[s] is None]
        if aim:  # else most answers would be refused
            allowed = [p for p in PEOPLE if model.may_answer(p, target)]
            who = allowed[PEOPLE.index(who) % len(allowed)] if allowed else who
        if aim == 2:
            buttons = [
                a
                for a in Answer
                if all(a in model.offered(who, target, target.widest[s]) for s in open_skills)
            ]
            if not buttons:
                # Skills capped differently can share no button (no "... all" row then);
                # each is still answerable on its own row.
                event("answer: no button common to every open skill")
                return
            answer = buttons[pick % len(buttons)]
        call = {
            "request": request,
            "user": world.people[who],
            "answer": answer,
            "skills": [one_skill] if one_skill in target.items else None,
        }
        if target.status != RequestStatus.PENDING:
            event("answer: request closed")
            with pytest.raises(RequestClosedError):
                request_answer(**call)
            return
        refused = not model.may_answer(who, target) or any(
            answer not in model.offered(who, target, target.widest[s]) for s in open_skills
        )
        if refused:  # S13: the server refuses an answer not offered, and writes nothing
            event("answer: refused")
            with pytest.raises(NotAllowedError):
                request_answer(**call)
            return
        outcome = request_answer(**call)
        event(f"answer: written {answer.name}" if open_skills else "answer: all already answered")
        assert sorted(i.skill for i in outcome.written) == sorted(open_skills)
        assert sorted(i.skill for i in outcome.already_answered) == sorted(set(chosen) - set(open_skills))
        assert not outcome.failed
        for skill in open_skills:
            target.items[skill] = model.write(answer, target, skill, who)
        if all(target.items.values()):
            target.status = RequestStatus.ANSWERED
        assert outcome.request_answered is (target.status == RequestStatus.ANSWERED and bool(open_skills))

    elif kind == "cancel":
        target = world.request_of(op[1])
        if target is None:
            return
        request = ApprovalRequest.objects.get(pk=target.pk)
        if target.status != RequestStatus.PENDING:
            with pytest.raises(RequestClosedError):
                request_cancel(request=request, actor=Actor.for_runtime(runtime))
            return
        request_cancel(request=request, actor=Actor.for_runtime(runtime))
        event(f"cancel: {'held' if target.holder else 'no session'}")
        model.abort(target, RequestStatus.CANCELLED)

    elif kind == "expire":
        _, pick, sweep = op
        target = world.request_of(pick)
        if target is None:
            return
        ApprovalRequest.objects.filter(pk=target.pk).update(
            expires_at=timezone.now() - dt.timedelta(seconds=1)
        )
        if sweep:
            requests_expire_due()
        else:
            expired = request_expire_if_due(ApprovalRequest.objects.get(pk=target.pk))
            assert expired is (target.status == RequestStatus.PENDING)
        if target.status == RequestStatus.PENDING:
            model.abort(target, RequestStatus.EXPIRED)

    elif kind == "clear":
        removed = session_clear(runtime=runtime, session_id=op[1], actor=TEST_ACTOR)
        assert removed == model.drop(lambda key: key[1] == op[1])

    elif kind == "revoke":
        _, sid, agent = op
        removed = session_revoke(runtime=runtime, session_id=sid, agent=agent, actor=TEST_ACTOR)
        expected_session = model.drop(lambda key: key[1] == sid)
        expected_agent = model.drop(lambda key: key[0] == "AGENT") if agent else 0
        assert removed == (expected_session, expected_agent)

    elif kind == "agent_revoke":
        removed = agent_grants_revoke(runtime=runtime, actor=Actor.for_user(world.people["olivia"]))
        assert removed == model.drop(lambda key: key[0] == "AGENT")

    elif kind == "grant_revoke":
        grants = list(Grant.objects.active().filter(runtime=runtime).select_related("session").order_by("pk"))
        if not grants:
            return
        grant = grants[op[1] % len(grants)]
        assert grant_revoke(grant=grant, actor=TEST_ACTOR)
        key = (grant.scope, grant.session.session_id if grant.session else None, grant.turn_id, grant.skill)
        del model.grants[key]

    elif kind == "rule":
        _, skill, action, widest = op
        existing = SkillRule.objects.filter(runtime=runtime, pattern=skill).first()
        if action is None:
            if existing is not None:
                rules.rule_delete(rule=existing, actor=TEST_ACTOR)
            model.rules.pop(skill, None)
        else:  # a rule changed is the old one deleted and the new one written
            if existing is not None:
                rules.rule_delete(rule=existing, actor=TEST_ACTOR)
            rules.rule_create(
                pattern=skill, action=action, widest_scope=widest, actor=TEST_ACTOR, runtime=runtime
            )
            model.rules[skill] = (str(action), str(widest))

    if kind in ("cancel", "expire"):
        # (d) S9: an abort never writes, changes or removes anything agent-wide.
        agent_after = set(
            Grant.objects.active().filter(runtime=runtime, scope="AGENT").values_list("pk", flat=True)
        )
        assert agent_after == agent_before
        assert Grant.objects.filter(runtime=runtime, scope="AGENT").count() == agent_rows_before


def check(world: World) -> None:
    model, runtime = world.model, world.runtime
    sessions = {s: session_lookup(runtime=runtime, session_id=s) for s in SESSIONS}
    seen: dict[tuple, dict[str, tuple[str, str]]] = {}
    for session, invoking, turn in PROBES:
        verdicts = skills_decide(
            runtime=runtime,
            skills=list(SKILLS),
            session=sessions[session] if session else None,
            invoking_session=sessions[invoking] if invoking else None,
            turn_id=turn,
        )
        got = {v.skill: (str(v.decision), str(v.source)) for v in verdicts}
        seen[(session, invoking, turn)] = got
        if session and sessions[session] is not None:
            # Every entry to the one decision path agrees: by the sessions in hand (above), by
            # ids (the API's, after authentication) and fused behind the token (below).
            by_ids = decide_skills(
                runtime,
                SkillCall(
                    skills=list(SKILLS),
                    session_id=session,
                    invoking_session_id=invoking,
                    principal=None,
                    turn_id=turn,
                ),
            )
            assert {v.skill: (str(v.decision), str(v.source)) for v in by_ids} == got
        if not session or sessions[session] is not None:
            # The token in the same statement, forks included. (An unseen session would be
            # created: not here.)
            fused = decide_for_token(
                world.token,
                SkillCall(
                    skills=list(SKILLS),
                    session_id=session,
                    invoking_session_id=invoking,
                    principal=None,
                    turn_id=turn,
                ),
                decide_skills,
            )
            assert fused is not None
            assert fused[0].runtime.pk == runtime.pk
            assert {v.skill: (str(v.decision), str(v.source)) for v in fused[1]} == got
        # The services agree with the model of the stores.
        assert got == {s: model.decide(session, invoking, turn, s) for s in SKILLS}, (session, invoking, turn)

    grants = list(Grant.objects.filter(runtime=runtime).select_related("session", "granted_by"))
    active = [g for g in grants if g.revoked_at is None]
    for grant in active:
        # (a) S2: a session DENY in force beats anything agent-wide, for the session and its forks.
        if grant.scope == "SESSION" and grant.decision == "DENY":
            sid = grant.session.session_id
            assert seen[(sid, None, None)][grant.skill] == ("DENY", "SESSION")
            assert seen[(None, sid, None)][grant.skill] == ("DENY", "INVOKING_SESSION")
    for grant in grants:
        # (b) S11: an ALLOW is only ever written by a person's answer; agent-wide only by those
        # S13 lets grant it. Aborts only ever deny for a session (S9).
        if grant.decision == "ALLOW":
            assert grant.granted_by is not None
            assert grant.origin in ("ANSWER", "ESCALATION")
            if grant.scope == "AGENT":
                assert grant.granted_by.username in AGENT_GRANTERS
        if grant.origin == "ABORT":
            assert (grant.scope, grant.decision, grant.granted_by) == ("SESSION", "DENY", None)
        if grant.origin == "ESCALATION":
            assert grant.scope == "AGENT"
    for verdicts in seen.values():
        for skill, (decision, source) in verdicts.items():
            if decision == "ALLOW" and source == "RULE":
                assert model.rules[skill][0] == "ALLOW"
            assert (decision, source) != ("ALLOW", "DEFAULT")
    # (c) S3: a fork sees exactly what its invoking session sees, never more.
    for sid, turn in FORK_PAIRS:
        fork = {s: d for s, (d, _) in seen[(None, sid, turn)].items()}
        own = {s: d for s, (d, _) in seen[(sid, None, turn)].items()}
        assert fork == own
    for skill in SKILLS:
        # s-2 forked from s-1: where s-2 holds nothing of its own, it decides as s-1 does.
        if ("SESSION", "s-2", "", skill) not in model.grants:
            assert seen[("s-2", "s-1", None)][skill][0] == seen[("s-1", None, None)][skill][0]
        if (
            seen[("s-1", None, None)][skill][0] == "DENY"
            and ("SESSION", "s-2", "", skill) not in model.grants
        ):
            assert seen[("s-2", "s-1", None)][skill][0] != "ALLOW"
    # (e) at most one active grant per key.
    duplicates = (
        Grant.objects.active()
        .filter(runtime=runtime)
        .values("scope", "session_id", "turn_id", "skill")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    assert not duplicates.exists()
    assert len(active) == len(model.grants)
    # Requests and items are what the model says; S7: ANSWERED only when every skill is decided.
    rows = {r.pk: r for r in ApprovalRequest.objects.filter(runtime=runtime)}
    items = {(i.request_id, i.skill): i for i in ApprovalItem.objects.filter(request__runtime=runtime)}
    for expected in model.requests:
        assert rows[expected.pk].status == expected.status
        for skill, decision in expected.items.items():
            row = items[(expected.pk, skill)]
            assert (row.decision or None) == decision
            if row.answered_by_id is not None:  # S13: Deny this request stores nothing
                assert (row.grant_id is None) is (row.scope == "REQUEST")
        if expected.status == RequestStatus.ANSWERED:
            assert all(expected.items.values())


@pytest.fixture(autouse=True)
def fresh_rule_index() -> Iterator[None]:
    """The rule index is cached per process, and that outlives each test's rollback: start
    and end every test with none cached, so no test reads an index another one built."""
    forget_rule_index()
    yield
    forget_rule_index()


def forget_rule_index() -> None:
    key = getattr(rules, "VERSION_CACHE_KEY", None)
    if key:
        cache.delete(key)
    rules.rule_index_reset()


@pytest.fixture
def people(make_user: Callable[..., User]) -> dict[str, User]:
    return {
        "olivia": make_user("olivia", Role.OPERATOR),
        "alice": make_user("alice", Role.APPROVER),
        "bob": make_user("bob", Role.APPROVER),
        "owen": make_user("owen", Role.APPROVER),
        "audrey": make_user("audrey", Role.AUDITOR),
    }


class Histories(RuleBasedStateMachine):
    """One runtime's history: each rule plays an operation, the invariant checks every step."""

    people: dict[str, User] = {}

    def __init__(self) -> None:
        super().__init__()
        self.world: World | None = None

    @initialize(
        initial=st.tuples(st.sampled_from(["", "alice", "bob"]), st.sampled_from(["", "alice", "bob"]))
    )
    def start(self, initial: tuple[str, str]) -> None:
        runtime = runtime_create(name=f"prop-{next(_names)}", owner=self.people["owen"], actor=TEST_ACTOR)
        for sid, principal in zip(SESSIONS, initial, strict=True):
            session_touch(runtime=runtime, session_id=sid, principal=principal or None)
        principals = dict(zip(SESSIONS, initial, strict=True))
        _, token = token_issue(runtime=runtime, actor=TEST_ACTOR)
        self.world = World(
            runtime=runtime, people=self.people, model=Model(principals=principals), token=token
        )

    def play(self, op: tuple) -> None:
        assert self.world is not None
        play(self.world, op)

    def has_requests(self) -> bool:
        return self.world is not None and bool(self.world.model.requests)

    # Requests and answers come up most often, so that histories get somewhere.
    @rule(op=create_op)
    def create(self, op: tuple) -> None:
        self.play(op)

    @rule(op=create_op)
    def create_another(self, op: tuple) -> None:
        self.play(op)

    @precondition(has_requests)
    @rule(op=answer_op)
    def answer(self, op: tuple) -> None:
        self.play(op)

    @precondition(has_requests)
    @rule(op=answer_op)
    def answer_again(self, op: tuple) -> None:
        self.play(op)

    @precondition(has_requests)
    @rule(op=answer_op)
    def answer_once_more(self, op: tuple) -> None:
        self.play(op)

    @rule(
        op=st.one_of(
            BY_KIND["cancel"],
            BY_KIND["expire"],
            BY_KIND["clear"],
            BY_KIND["revoke"],
            BY_KIND["agent_revoke"],
            BY_KIND["grant_revoke"],
            BY_KIND["rule"],
        )
    )
    def something_else(self, op: tuple) -> None:
        self.play(op)

    @invariant()
    def holds(self) -> None:
        if self.world is not None:
            check(self.world)


@pytest.mark.django_db
@pytest.mark.hypothesis  # a state machine: `make fuzz` (-m hypothesis) runs it too
def test_random_histories_keep_the_invariants(
    people: dict[str, User],
) -> None:  # S2, S3, S4, S6, S7, S9, S10, S11, S12, S13
    Histories.people = people
    run_state_machine_as_test(
        Histories,
        settings=budget(50, HealthCheck.function_scoped_fixture, stateful_step_count=15),
    )
