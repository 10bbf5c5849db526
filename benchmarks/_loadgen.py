"""The simulation behind `audit_generate_load`: ~90 days of a busy installation, in time order.

Approval requests arrive as a Poisson process into sessions that are open at that moment;
each request's fate is decided when it arrives (answered after a log-normal wait, expired
after ten minutes, or cancelled by its runtime) and its events are scheduled on a heap.
Grants live in memory while they are in force, so a clear, a session revoke, an
agent-wide revoke or the idle TTL can end them with the right counts; a grant's row is
written once it is revoked, or at the end. A request is only opened for a skill that no
grant in force already decides (it would not have been asked otherwise), which also keeps
the one-grant-in-force constraints true. Noise — sign-ins, failed sign-ins, settings and
tool changes, MCP syncs — fills the rest. Exactly `events` events are written.

Time only moves forward, and never past `end` (a minute before the command started): each
handler runs no earlier than the last event written, the rows it writes carry the times of
the events that record them, and nothing scheduled after `end` ever happens (a session's
idle TTL that would end after it leaves its grants in force; an answer due after it leaves
its request PENDING). The arrival rates are steered as the run goes, so the target is
reached just before `end`; should it still fall short, the last few events are noise spread
over the time left.

Rows go to `Sink`s: PostgreSQL COPY in batches, or executemany on SQLite.
"""

from __future__ import annotations

import bisect
import datetime as dt
import heapq
import json
import math
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from aimon_admin.approvals.services.errors import ESCALATION_REACH
from aimon_admin.audit import chain
from aimon_admin.audit.models import format_timestamp

PREFIX = "load-"
TICK = dt.timedelta(microseconds=1)
# How often (as a share of the window) the arrival rates are steered towards the target, and
# how far before `end` the run aims to reach it.
STEER_EVERY = 1 / 400
AIM_BEFORE_END = 1 / 2000
REQUEST_TTL = dt.timedelta(minutes=10)
SESSION_IDLE_TTL = dt.timedelta(hours=24)
EVENT_COLUMNS = (*chain.CONTENT_FIELDS, "hash")
SESSION_COLUMNS = ("id", "runtime_id", "session_id", "principal", "first_seen_at", "last_seen_at")
REQUEST_COLUMNS = (
    "id",
    "runtime_id",
    "session_id",
    "invoking_session_id",
    "turn_id",
    "principal",
    "reason",
    "status",
    "idempotency_key",
    "created_at",
    "expires_at",
    "answered_at",
    "answered_by_id",
    "closed_at",
)
ITEM_COLUMNS = (
    "id",
    "request_id",
    "position",
    "skill",
    "widest_scope",
    "decision",
    "scope",
    "source",
    "answered_by_id",
    "answered_at",
    "grant_id",
)
GRANT_COLUMNS = (
    "id",
    "runtime_id",
    "scope",
    "decision",
    "skill",
    "session_id",
    "turn_id",
    "origin",
    "granted_by_id",
    "request_id",
    "created_at",
    "expires_at",
    "revoked_at",
    "revoked_by_id",
    "revoke_reason",
)

_VERBS = ["read", "write", "deploy", "delete", "restart", "query", "send", "migrate", "scale", "rotate"]
_OBJECTS = [
    "logs",
    "db",
    "service",
    "cache",
    "secrets",
    "email",
    "bucket",
    "cluster",
    "dns",
    "queue",
    "repo",
    "ticket",
    "invoice",
    "calendar",
    "vm",
    "firewall",
    "backup",
    "metrics",
    "user",
    "wiki",
]
SKILLS = [f"{verb}-{obj}" for obj in _OBJECTS for verb in _VERBS] + [
    f"{verb}-{obj}-prod" for obj in _OBJECTS[:10] for verb in _VERBS
]


class Sink:
    """Rows for one table, written in batches: COPY on PostgreSQL, executemany on SQLite."""

    def __init__(self, table: str, columns: Sequence[str], batch: int) -> None:
        self.table, self.columns, self.batch = table, tuple(columns), batch
        self.rows: list[tuple[Any, ...]] = []
        self.written = 0

    def add(self, row: tuple[Any, ...]) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        names = ", ".join(self.columns)
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                with cursor.cursor.copy(f"COPY {self.table} ({names}) FROM STDIN") as copy:
                    for row in self.rows:
                        copy.write_row(row)
            else:
                marks = ", ".join(["%s"] * len(self.columns))
                cursor.executemany(
                    f"INSERT INTO {self.table} ({names}) VALUES ({marks})",  # noqa: S608 - our own names # nosec B608
                    [tuple(_sqlite(value) for value in row) for row in self.rows],
                )
        self.written += len(self.rows)
        self.rows = []


def _sqlite(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return connection.ops.adapt_datetimefield_value(value)
    if isinstance(value, uuid.UUID):
        return value.hex
    return value


@dataclass
class People:
    operators: list[tuple[int, str]]
    approvers: list[tuple[int, str]]
    auditors: list[tuple[int, str]]


@dataclass
class Runtime:
    id: int
    name: str
    owner: tuple[int, str]


@dataclass
class SessionPlan:
    index: int
    id: int
    runtime: Runtime
    session_id: str
    principal: tuple[int, str]
    start: dt.datetime
    end: dt.datetime


@dataclass
class Grant:
    row: list[Any]
    session: int | None  # SessionPlan.index
    runtime: int
    key: tuple[Any, ...] | None


@dataclass
class Request:
    id: uuid.UUID
    runtime: Runtime
    session: SessionPlan | None
    invoking: SessionPlan | None
    turn_id: str
    principal: str
    created: dt.datetime
    skills: list[str]
    answers: list[str]  # per skill: TURN, SESSION, AGENT, DENY
    answered_by: tuple[int, str] | None
    items: list[list[Any]] = field(default_factory=list)

    @property
    def holder(self) -> SessionPlan | None:
        return self.session or self.invoking


@dataclass
class Stats:
    events: int = 0
    requests: int = 0
    grants: int = 0
    escalated: int = 0
    revoked: int = 0
    by_action: dict[str, int] = field(default_factory=dict)


class Simulation:
    def __init__(
        self,
        *,
        rng: random.Random,
        events: int,
        people: People,
        runtimes: list[Runtime],
        sessions: list[SessionPlan],
        start: dt.datetime,
        end: dt.datetime,
        head: tuple[int, str],
        ids: dict[str, int],
        sinks: dict[str, Sink],
        progress: Callable[[int], None],
    ) -> None:
        self.rng, self.target, self.people = rng, events, people
        self.runtimes, self.sessions = runtimes, sessions
        self.start, self.end = start, end
        self.seq, self.prev_hash = head
        self.last_time = start
        self.ids, self.sinks, self.progress = ids, sinks, progress
        # Request and noise arrivals run at their base rate times `pace`, steered by `steer`.
        self.pace = 1.0
        self.window = (end - start).total_seconds()
        self.goal = end - dt.timedelta(seconds=self.window * AIM_BEFORE_END)
        self.steered_at, self.steered_events = start, 0
        self.stats = Stats()
        self.heap: list[tuple[dt.datetime, int, str, Any]] = []
        self.counter = 0
        self.grants: dict[int, Grant] = {}
        self.session_keys: dict[tuple[int, str], int] = {}  # (session index, skill) → grant id or -1
        self.agent_keys: dict[tuple[int, str], int] = {}  # (runtime id, skill) → grant id or -1
        self.session_grants: dict[int, set[int]] = {}
        self.agent_grants: dict[int, set[int]] = {}
        self.open: list[SessionPlan] = []
        self.next_session = 0
        self.pending: dict[uuid.UUID, Request] = {}
        weights = [1 / (rank + 1) ** 0.9 for rank in range(len(SKILLS))]
        self.skill_cum = [sum(weights[: i + 1]) for i in range(len(weights))]
        self.runtime_cum = [sum(1 / (i + 1) for i in range(k + 1)) for k in range(len(runtimes))]

    # --- events ---------------------------------------------------------------------------------

    def emit(
        self,
        when: dt.datetime,
        action: str,
        *,
        actor: tuple[int | None, str],
        channel: str,
        level: str = "INFO",
        runtime_id: int | None = None,
        session_key: str = "",
        subject_type: str = "",
        subject: str = "",
        details: dict[str, Any] | None = None,
        request_id: str = "",
    ) -> dt.datetime:
        when = self.tick(when)
        self.last_time = when
        self.seq += 1
        content = {
            "seq": self.seq,
            "created_at": format_timestamp(when),
            "actor_id": actor[0],
            "actor_label": actor[1],
            "channel": channel,
            "action": action,
            "level": level,
            "runtime_id": runtime_id,
            "session_key": session_key,
            "subject_type": subject_type,
            "subject": subject,
            "details": details or {},
            "request_id": request_id,
            "prev_hash": self.prev_hash,
        }
        digest = chain.compute_hash(content)
        self.sinks["event"].add(
            (
                self.seq,
                when,
                actor[0],
                actor[1],
                channel,
                action,
                level,
                runtime_id,
                session_key,
                subject_type,
                subject,
                json.dumps(content["details"], ensure_ascii=False),
                request_id,
                self.prev_hash,
                digest,
            )
        )
        self.prev_hash = digest
        self.stats.events += 1
        self.stats.by_action[action] = self.stats.by_action.get(action, 0) + 1
        if self.stats.events % 50_000 == 0:
            self.progress(self.stats.events)
        return when

    def tick(self, when: dt.datetime) -> dt.datetime:
        """The time the next event written at `when` will carry: after the last one, by `end`."""
        return max(min(when, self.end), self.last_time + TICK)

    def request_id(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def left(self) -> int:
        return self.target - self.stats.events

    # --- scheduling -----------------------------------------------------------------------------

    def at(self, when: dt.datetime, kind: str, payload: Any = None) -> None:
        self.counter += 1
        heapq.heappush(self.heap, (when, self.counter, kind, payload))

    def after(self, when: dt.datetime, rate_per_second: float) -> dt.datetime:
        return when + dt.timedelta(seconds=self.rng.expovariate(rate_per_second))

    def steer(self, when: dt.datetime) -> None:
        """Set `pace` so that the events still to write fit the time left before `goal`.

        The first estimate of events per request is rough (skills already decided are not
        asked, sessions end), so the rate actually seen since the last check is compared
        with the rate needed; the square root damps the step.
        """
        seconds = (when - self.steered_at).total_seconds()
        if seconds < self.window * STEER_EVERY:
            return
        produced = self.stats.events - self.steered_events
        time_left = (self.goal - when).total_seconds()
        if produced > 0 and time_left > 0:
            needed = self.left() / time_left
            seen = produced / seconds
            self.pace *= min(max(needed / seen, 0.5), 2.0) ** 0.5
        self.steered_at, self.steered_events = when, self.stats.events

    def next_id(self, table: str) -> int:
        self.ids[table] += 1
        return self.ids[table]

    # --- the run --------------------------------------------------------------------------------

    def run(self, *, setup_events: int) -> Stats:
        window = (self.end - self.start).total_seconds()
        sessions = len(self.sessions)
        # Expected events: ~1.65 per request (one per skill, some revocations), ~0.85 per
        # session (clears, revokes, idle expiry with grants), the rest noise (12%): a first
        # estimate, 2% past the target, which `steer` corrects as the run goes.
        budget = (self.target - setup_events) * 1.02
        noise_rate = 0.12 * budget / window
        request_rate = max(budget * 0.88 - 0.85 * sessions, budget * 0.3) / 1.65 / window
        self.at(self.after(self.start, request_rate), "request", request_rate)
        self.at(self.after(self.start, noise_rate), "noise", noise_rate)
        for runtime in self.runtimes:
            self.at(self.after(self.start, 1 / (7 * 86400)), "agent-revoke", runtime)
        for plan in self.sessions:
            self.at(plan.end + SESSION_IDLE_TTL, "session-expire", plan)
            roll = self.rng.random()
            if roll < 0.2:
                self.at(self._within(plan), "session-clear", plan)
            elif roll < 0.23:
                self.at(self._within(plan), "session-revoke", plan)
        while self.left() > 0:
            when, _, kind, payload = heapq.heappop(self.heap)
            if when > self.end:
                self._fill_to_end()
                break
            # Nothing happens before the last event written (an answer's skills take seconds),
            # so no row is ever older than a row it follows from.
            when = max(when, self.last_time + TICK)
            self.steer(when)
            getattr(self, "on_" + kind.replace("-", "_"))(when, payload)
        self.finish()
        return self.stats

    def _fill_to_end(self) -> None:
        """The events still owed when the window is spent: noise, evenly over what is left of it."""
        count, start = self.left(), self.last_time
        step = (self.end - start) / (count + 1)
        for index in range(1, count + 1):
            self.on_noise(start + step * index, None)

    def _within(self, plan: SessionPlan) -> dt.datetime:
        span = (plan.end - plan.start).total_seconds()
        return plan.start + dt.timedelta(seconds=span * (0.5 + 0.5 * self.rng.random()))

    def finish(self) -> None:
        """Rows still in memory: grants in force, requests nobody had answered yet (PENDING)."""
        for grant in self.grants.values():
            self.sinks["grant"].add(tuple(grant.row))
        for request in list(self.pending.values()):
            self._write_request(request, status="PENDING", closed=None, answered=None)
        for sink in self.sinks.values():
            sink.flush()

    # --- who and where --------------------------------------------------------------------------

    def pick_runtime(self) -> Runtime:
        return self.runtimes[self._pick(self.runtime_cum)]

    def _pick(self, cumulative: list[float]) -> int:
        return min(bisect.bisect(cumulative, self.rng.random() * cumulative[-1]), len(cumulative) - 1)

    def open_session(self, when: dt.datetime) -> SessionPlan | None:
        while self.next_session < len(self.sessions) and self.sessions[self.next_session].start <= when:
            self.open.append(self.sessions[self.next_session])
            self.next_session += 1
        while self.open:
            index = self.rng.randrange(len(self.open))
            plan = self.open[index]
            if plan.end > when:
                return plan
            self.open[index] = self.open[-1]
            self.open.pop()
        return None

    def free(
        self, skill: str, runtime: Runtime, holder: SessionPlan | None, session: SessionPlan | None
    ) -> bool:
        """True when no grant in force (or one already being asked for) decides the skill here."""
        if (runtime.id, skill) in self.agent_keys:
            return False
        return all(plan is None or (plan.index, skill) not in self.session_keys for plan in (holder, session))

    # --- handlers -------------------------------------------------------------------------------

    def on_request(self, when: dt.datetime, rate: float) -> None:
        self.at(self.after(when, rate * self.pace), "request", rate)
        roll = self.rng.random()
        session = invoking = None
        if roll < 0.85:
            session = self.open_session(when)
        elif roll < 0.92:
            invoking = self.open_session(when)
        runtime = (session or invoking).runtime if (session or invoking) else self.pick_runtime()
        holder = session or invoking
        turn_id = f"turn-{self.rng.getrandbits(40):010x}" if session and self.rng.random() < 0.4 else ""
        wanted = 1 if self.rng.random() < 0.6 else (2 if self.rng.random() < 0.75 else 3)
        skills: list[str] = []
        for _ in range(wanted * 4):
            skill = SKILLS[self._pick(self.skill_cum)]
            if skill not in skills and self.free(skill, runtime, holder, session):
                skills.append(skill)
                if len(skills) == wanted:
                    break
        if not skills:
            return
        principal = holder.principal if holder else None
        fate = self.rng.random()
        answered_by: tuple[int, str] | None = None
        answers: list[str] = []
        if fate < 0.78:
            if principal is not None and self.rng.random() < 0.9:
                answered_by = principal
            else:
                answered_by = (
                    runtime.owner if self.rng.random() < 0.6 else self.rng.choice(self.people.operators)
                )
            may_agent = answered_by in self.people.operators or answered_by == runtime.owner
            for _ in skills:
                answers.append(self._answer(holder is not None, bool(turn_id), may_agent))
        request = Request(
            id=uuid.UUID(int=self.rng.getrandbits(128), version=4),
            runtime=runtime,
            session=session,
            invoking=invoking,
            turn_id=turn_id,
            principal=principal[1] if principal else "",
            created=when,
            skills=skills,
            answers=answers,
            answered_by=answered_by,
        )
        # Reserve the key each outcome will write, so nothing else is asked or granted there.
        for index, skill in enumerate(skills):
            key = self._key(request, answers[index] if answers else "ABORT", skill)
            if key is not None:
                (self.agent_keys if key[0] == "agent" else self.session_keys)[key[1:]] = -1  # type: ignore[index]
        self.pending[request.id] = request
        self.stats.requests += 1
        if answers:
            wait = min(self.rng.lognormvariate(math.log(45), 1.1), REQUEST_TTL.total_seconds() - 5)
            self.at(when + dt.timedelta(seconds=wait), "answer", request)
        elif fate < 0.95:
            self.at(when + REQUEST_TTL, "abort", (request, "EXPIRED"))
        else:
            self.at(when + dt.timedelta(seconds=self.rng.uniform(5, 300)), "abort", (request, "CANCELLED"))

    def _answer(self, has_holder: bool, has_turn: bool, may_agent: bool) -> str:
        roll = self.rng.random()
        if has_holder:
            if has_turn and roll < 0.2:
                return "TURN"
            if may_agent and roll > 0.95:
                return "AGENT"
            return "DENY" if roll > 0.68 else "SESSION"
        if may_agent and roll < 0.15:
            return "AGENT"
        return "DENY" if roll > 0.7 else "SESSION"

    def _key(self, request: Request, answer: str, skill: str) -> tuple[Any, ...] | None:
        holder = request.holder
        if answer == "TURN":
            return None
        if answer == "AGENT" or holder is None:
            return None if answer == "ABORT" else ("agent", request.runtime.id, skill)
        return ("session", holder.index, skill)

    def on_answer(self, when: dt.datetime, request: Request) -> None:
        if len(request.skills) > self.left():
            # Not enough events left for every skill: leave it pending, as at any cut-off.
            self.on_noise(when, None)
            return
        user = request.answered_by
        assert user is not None  # nosec B101 # a load generator's own invariant, not a security check
        request_id = self.request_id()
        for position, (skill, answer) in enumerate(zip(request.skills, request.answers, strict=True)):
            holder = request.holder
            escalated = holder is None and answer in {"SESSION", "DENY"}
            scope = (
                "TURN"
                if answer == "TURN"
                else ("AGENT" if answer == "AGENT" or holder is None else "SESSION")
            )
            decision = "DENY" if answer == "DENY" else "ALLOW"
            key = self._key(request, answer, skill)
            # The grant, its item and its event carry the time the event is written at.
            at = self.tick(when + dt.timedelta(milliseconds=position * self.rng.randint(0, 2500)))
            grant = self._grant(
                request,
                skill,
                scope=scope,
                decision=decision,
                origin="ESCALATION" if escalated else "ANSWER",
                user=user,
                when=at,
                key=key,
            )
            details: dict[str, Any] = {
                "decision": decision,
                "scope": scope,
                "request_id": str(request.id),
                "grant_id": grant.row[0],
                "answered_by": user[1],
            }
            if request.invoking is not None and scope != "AGENT":
                details["lands_on_invoking_session"] = request.invoking.session_id
            if escalated:
                details.update(
                    reach=ESCALATION_REACH,
                    all_sessions=True,
                    expires=False,
                    survives_clear=True,
                    removed_by="Revoke (this approval on its own), or Revoke agent-wide",
                )
                self.stats.escalated += 1
            session_key = holder.session_id if holder else ""
            at = self.emit(
                at,
                "SKILL_GRANT_ESCALATED" if escalated else "SKILL_GRANTED",
                actor=user,
                channel="BROWSER",
                level="WARNING" if escalated else "INFO",
                runtime_id=request.runtime.id,
                session_key=session_key,
                subject_type="skill",
                subject=skill,
                details=details,
                request_id=request_id,
            )
            request.items.append(
                [
                    self.next_id("item"),
                    request.id,
                    position,
                    skill,
                    "AGENT",
                    decision,
                    scope,
                    "",
                    user[0],
                    at,
                    grant.row[0],
                ]
            )
            # Some grants are taken back on their own, hours to weeks later.
            if self.rng.random() < (0.35 if scope == "AGENT" else 0.08):
                self.at(at + dt.timedelta(hours=self.rng.expovariate(1 / 30)), "grant-revoke", grant.row[0])
        self._write_request(
            request, status="ANSWERED", closed=self.last_time, answered=(self.last_time, user)
        )

    def _grant(
        self,
        request: Request,
        skill: str,
        *,
        scope: str,
        decision: str,
        origin: str,
        user: tuple[int, str] | None,
        when: dt.datetime,
        key: tuple[Any, ...] | None,
    ) -> Grant:
        holder = request.holder if scope != "AGENT" else None
        grant_id = self.next_id("grant")
        row = [
            grant_id,
            request.runtime.id,
            scope,
            decision,
            skill,
            holder.id if holder else None,
            request.turn_id if scope == "TURN" else "",
            origin,
            user[0] if user else None,
            request.id,
            when,
            None,
            None,
            None,
            "",
        ]
        grant = Grant(row=row, session=holder.index if holder else None, runtime=request.runtime.id, key=key)
        self.grants[grant_id] = grant
        if key is not None:
            (self.agent_keys if key[0] == "agent" else self.session_keys)[key[1:]] = grant_id  # type: ignore[index]
        if holder is not None:
            self.session_grants.setdefault(holder.index, set()).add(grant_id)
        else:
            self.agent_grants.setdefault(request.runtime.id, set()).add(grant_id)
        self.stats.grants += 1
        return grant

    def _revoke(self, grant_id: int, when: dt.datetime, reason: str, by: int | None) -> bool:
        grant = self.grants.pop(grant_id, None)
        if grant is None:
            return False
        grant.row[12], grant.row[13], grant.row[14] = when, by, reason
        if grant.key is not None:
            keys = self.agent_keys if grant.key[0] == "agent" else self.session_keys
            if keys.get(grant.key[1:]) == grant_id:  # type: ignore[arg-type]
                del keys[grant.key[1:]]  # type: ignore[arg-type]
        if grant.session is not None:
            self.session_grants.get(grant.session, set()).discard(grant_id)
        else:
            self.agent_grants.get(grant.runtime, set()).discard(grant_id)
        self.sinks["grant"].add(tuple(grant.row))
        self.stats.revoked += 1
        return True

    def on_abort(self, when: dt.datetime, payload: tuple[Request, str]) -> None:
        request, status = payload
        if len(request.skills) > self.left():
            self.on_noise(when, None)
            return
        expired = status == "EXPIRED"
        actor: tuple[int | None, str] = (
            (None, "request-expiry") if expired else (None, f"runtime:{request.runtime.name}")
        )
        channel = "TASK" if expired else "API"
        request_id = f"task-{self.request_id()}" if expired else self.request_id()
        why = "timed out" if expired else "cancelled by the runtime"
        holder = request.holder
        for position, skill in enumerate(request.skills):
            details: dict[str, Any] = {"request_id": str(request.id), "why": why}
            if holder is None:
                details.update(
                    written=False, note="no session to hold a denial; the skill stays ASK (never agent-wide)"
                )
                request.items.append(
                    [self.next_id("item"), request.id, position, skill, "AGENT", "", "", "", None, None, None]
                )
            else:
                grant = self._grant(
                    request,
                    skill,
                    scope="SESSION",
                    decision="DENY",
                    origin="ABORT",
                    user=None,
                    when=when,
                    key=("session", holder.index, skill),
                )
                details.update(written=True, grant_id=grant.row[0])
                request.items.append(
                    [
                        self.next_id("item"),
                        request.id,
                        position,
                        skill,
                        "AGENT",
                        "DENY",
                        "SESSION",
                        "",
                        None,
                        when,
                        grant.row[0],
                    ]
                )
            self.emit(
                when,
                "SKILL_ABORT_DENIED",
                actor=actor,
                channel=channel,
                runtime_id=request.runtime.id,
                session_key=holder.session_id if holder else "",
                subject_type="skill",
                subject=skill,
                details=details,
                request_id=request_id,
            )
        self._write_request(request, status=status, closed=self.last_time, answered=None)

    def _write_request(
        self,
        request: Request,
        *,
        status: str,
        closed: dt.datetime | None,
        answered: tuple[dt.datetime, tuple[int, str]] | None,
    ) -> None:
        self.pending.pop(request.id, None)
        self.sinks["request"].add(
            (
                request.id,
                request.runtime.id,
                request.session.id if request.session else None,
                request.invoking.id if request.invoking else None,
                request.turn_id,
                request.principal,
                f"The agent wants to {', '.join(request.skills)}.",
                status,
                "",
                request.created,
                request.created + REQUEST_TTL,
                answered[0] if answered else None,
                answered[1][0] if answered else None,
                closed,
            )
        )
        if status == "PENDING":
            request.items = [
                [self.next_id("item"), request.id, position, skill, "AGENT", "", "", "", None, None, None]
                for position, skill in enumerate(request.skills)
            ]
        for item in request.items:
            self.sinks["item"].add(tuple(item))
        # Keys reserved for outcomes that never came (a cut-off) are released with the request.
        if status == "PENDING":
            for index, skill in enumerate(request.skills):
                key = self._key(request, request.answers[index] if request.answers else "ABORT", skill)
                if key is not None:
                    keys = self.agent_keys if key[0] == "agent" else self.session_keys
                    if keys.get(key[1:]) == -1:  # type: ignore[arg-type]
                        del keys[key[1:]]  # type: ignore[arg-type]

    def on_grant_revoke(self, when: dt.datetime, grant_id: int) -> None:
        grant = self.grants.get(grant_id)
        if grant is None:
            return  # already gone with a clear, a revoke or the idle TTL
        row = grant.row
        by = (
            self.rng.choice(self.people.operators)
            if row[2] == "AGENT" or row[8] is None
            else next((p for p in self.people.approvers + self.people.operators if p[0] == row[8]), None)
        )
        if by is None:
            by = self.rng.choice(self.people.operators)
        self._revoke(grant_id, when, "SINGLE", by[0])
        plan = self.sessions[grant.session] if grant.session is not None else None
        self.emit(
            when,
            "GRANT_REVOKED",
            actor=by,
            channel="BROWSER",
            runtime_id=grant.runtime,
            session_key=plan.session_id if plan else "",
            subject_type="skill",
            subject=row[4],
            details={"grant_id": grant_id, "scope": row[2], "decision": row[3]},
            request_id=self.request_id(),
        )

    def _revoke_session(self, plan: SessionPlan, when: dt.datetime, reason: str, by: int | None) -> int:
        removed = 0
        for grant_id in sorted(self.session_grants.pop(plan.index, set())):
            removed += self._revoke(grant_id, when, reason, by)
        return removed

    def _revoke_agent(self, runtime_id: int, when: dt.datetime, by: int | None) -> int:
        removed = 0
        for grant_id in sorted(self.agent_grants.pop(runtime_id, set())):
            removed += self._revoke(grant_id, when, "REVOKE_AGENT", by)
        return removed

    def on_session_clear(self, when: dt.datetime, plan: SessionPlan) -> None:
        by_runtime = self.rng.random() < 0.7
        actor = (None, f"runtime:{plan.runtime.name}") if by_runtime else plan.principal
        removed = self._revoke_session(plan, when, "CLEAR", actor[0])
        self.emit(
            when,
            "SESSION_CLEARED",
            actor=actor,
            channel="API" if by_runtime else "BROWSER",
            runtime_id=plan.runtime.id,
            session_key=plan.session_id,
            details={"removed": removed},
            request_id=self.request_id(),
        )

    def on_session_revoke(self, when: dt.datetime, plan: SessionPlan) -> None:
        agent = self.rng.random() < 0.2
        actor = self.rng.choice(self.people.operators) if agent else plan.principal
        removed_session = self._revoke_session(plan, when, "REVOKE", actor[0])
        removed_agent = self._revoke_agent(plan.runtime.id, when, actor[0]) if agent else 0
        self.emit(
            when,
            "SESSION_REVOKED",
            actor=actor,
            channel="BROWSER",
            level="WARNING" if agent else "INFO",
            runtime_id=plan.runtime.id,
            session_key=plan.session_id,
            details={"removed_session": removed_session, "removed_agent": removed_agent, "agent": agent},
            request_id=self.request_id(),
        )

    def on_session_expire(self, when: dt.datetime, plan: SessionPlan) -> None:
        removed = self._revoke_session(plan, when, "EXPIRED", None)
        if removed:
            self.emit(
                when,
                "SESSION_EXPIRED",
                actor=(None, "session-ttl"),
                channel="TASK",
                runtime_id=plan.runtime.id,
                session_key=plan.session_id,
                details={"removed": removed, "idle_since": plan.end.isoformat()},
                request_id=f"task-{self.request_id()}",
            )

    def on_agent_revoke(self, when: dt.datetime, runtime: Runtime) -> None:
        self.at(self.after(when, 1 / (7 * 86400)), "agent-revoke", runtime)
        actor = runtime.owner
        removed = self._revoke_agent(runtime.id, when, actor[0])
        self.emit(
            when,
            "AGENT_GRANTS_REVOKED",
            actor=actor,
            channel="BROWSER",
            level="WARNING",
            runtime_id=runtime.id,
            details={"removed_agent": removed},
            request_id=self.request_id(),
        )

    def on_noise(self, when: dt.datetime, rate: float | None) -> None:
        if rate is not None:
            self.at(self.after(when, rate * self.pace), "noise", rate)
        roll = self.rng.random()
        person = self.rng.choice(self.people.approvers if self.rng.random() < 0.85 else self.people.operators)
        request_id = self.request_id()
        if roll < 0.45:
            self.emit(
                when,
                "LOGIN_SUCCEEDED",
                actor=person,
                channel="BROWSER",
                subject_type="user",
                subject=person[1],
                request_id=request_id,
            )
        elif roll < 0.70:
            self.emit(
                when,
                "LOGOUT",
                actor=person,
                channel="BROWSER",
                subject_type="user",
                subject=person[1],
                request_id=request_id,
            )
        elif roll < 0.78:
            name = person[1] if self.rng.random() < 0.7 else f"{PREFIX}unknown-{self.rng.randrange(50)}"
            self.emit(
                when,
                "LOGIN_FAILED",
                actor=(None, "anonymous"),
                channel="BROWSER",
                level="WARNING",
                subject_type="user",
                subject=name,
                request_id=request_id,
            )
        elif roll < 0.88:
            server = f"{PREFIX}mcp-{self.rng.randrange(12)}"
            seen = self.rng.randrange(5, 80)
            self.emit(
                when,
                "MCP_SYNC_SUCCEEDED",
                actor=(None, "mcp-sync"),
                channel="TASK",
                subject_type="mcp_server",
                subject=server,
                details={
                    "run_id": self.rng.randrange(1, 10**6),
                    "attempt": 1,
                    "trust": "IGNORE",
                    "tools_seen": seen,
                    "tools_added": 0,
                    "tools_changed": self.rng.randrange(3),
                    "tools_absent": 0,
                },
                request_id=f"task-{request_id}",
            )
        elif roll < 0.94:
            runtime = self.pick_runtime()
            tool = f"{self.rng.choice(_VERBS)}_{self.rng.choice(_OBJECTS)}"
            self.emit(
                when,
                "TOOL_DEFINITION_CHANGED",
                actor=(None, f"runtime:{runtime.name}"),
                channel="API",
                runtime_id=runtime.id,
                subject_type="tool",
                subject=tool,
                details={
                    "before": {"destructiveHint": True},
                    "after": {"destructiveHint": self.rng.random() < 0.5},
                },
                request_id=request_id,
            )
        else:
            runtime = self.pick_runtime()
            before, after = (
                ("READ_ONLY", "MUTATING") if self.rng.random() < 0.5 else ("MUTATING", "READ_ONLY")
            )
            self.emit(
                when,
                "RUNTIME_SETTINGS_CHANGED",
                actor=runtime.owner,
                channel="BROWSER",
                runtime_id=runtime.id,
                subject_type="runtime",
                subject=runtime.name,
                details={
                    "changed": ["exempt_at_or_below"],
                    "before": {"exempt_at_or_below": before},
                    "after": {"exempt_at_or_below": after},
                },
                request_id=request_id,
            )
