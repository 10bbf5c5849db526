"""Reads for the auditor's pages: the filtered log by keyset, escalated grants, what was
in force at a moment, and the export's chunks.

Everything here stays fast with a million events: pages are keyset ranges on `seq`
(never OFFSET), each filter has an index that starts with its column and ends with
`seq`, and nothing counts the whole table. A filter that is an OR (several actions; a
subject that may also be a skill named in the details) runs one index range per branch
and merges them, because an OR in one query makes the database sort every match.
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.db.models import ExpressionWrapper, Q, QuerySet, TextField
from django.db.models.fields.json import KT

from aimon_admin.approvals import selectors as approvals_selectors
from aimon_admin.approvals.choices import GrantScope
from aimon_admin.approvals.models import Grant, Session
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.filters import FilterError, LogFilters
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime

PAGE_SIZE = 50
ESCALATION_PAGE_SIZE = 50
IN_FORCE_LIMIT = 500
# The home counts escalated grants in force up to this ("50+"), as the operators' home does.
IN_FORCE_COUNT_LIMIT = approvals_selectors.ESCALATED_IN_FORCE_LIMIT
# Clocks of several web nodes may disagree by this much: seq, not created_at, is the
# log's order. Time filters are turned into seq ranges (so the seq indexes serve them)
# that are wider than the times by this margin; the times themselves still filter.
CLOCK_SKEW_MARGIN = dt.timedelta(minutes=5)
UNKNOWN_RUNTIME_MESSAGE = "No runtime is named {name!r}."
UNKNOWN_SESSION_MESSAGE = "Runtime {runtime!r} has no session {session!r}."

# A skill named in an event's details, as text. The wrapper makes "=" compare text (a bare
# KT compares JSON on SQLite); migration 0005 indexes this very expression.
DETAIL_SKILL = ExpressionWrapper(KT("details__skill"), output_field=TextField())

# What a list row reads: no details, no hashes.
_LIST_FIELDS = (
    "seq",
    "created_at",
    "actor_label",
    "channel",
    "action",
    "level",
    "runtime__name",
    "session_key",
    "subject_type",
    "subject",
)


Row = TypeVar("Row")


@dataclass(frozen=True)
class Page(Generic[Row]):
    """One keyset page, newest first."""

    rows: list[Row]
    older_cursor: int | None  # `before` for the next (older) page, None on the last page


def runtime_named(name: str, *, field: str = "runtime") -> AgentRuntime:
    runtime = AgentRuntime.objects.filter(name=name).first()
    if runtime is None:
        raise FilterError(field, UNKNOWN_RUNTIME_MESSAGE.format(name=name))
    return runtime


def _seq_bound(moment: dt.datetime, *, since: bool) -> int | None:
    """For `since`, a seq every event at or after `moment` is above (the last one well
    before it); else a seq every event before `moment` is below (the first one well after)."""
    if since:
        events = AuditEvent.objects.filter(created_at__lt=moment - CLOCK_SKEW_MARGIN).order_by("-created_at")
    else:
        events = AuditEvent.objects.filter(created_at__gte=moment + CLOCK_SKEW_MARGIN).order_by("created_at")
    return events.values_list("seq", flat=True).first()


def _keyset(rows: list[Row], size: int, seq: Callable[[Row], int]) -> Page[Row]:
    """The page of `rows` read one past it: the extra row says an older page exists."""
    return Page(rows[:size], seq(rows[size - 1]) if len(rows) > size else None)


def _branches(filters: LogFilters, *, list_columns: bool) -> list[QuerySet[AuditEvent]]:
    """A filter turned into querysets: one per OR branch, ANDed with the rest."""
    events = AuditEvent.objects.all()
    if list_columns:
        events = events.select_related("runtime").only(*_LIST_FIELDS)
    if filters.runtime:
        events = events.filter(runtime=runtime_named(filters.runtime))
    if filters.level:
        events = events.filter(level=filters.level)
    if filters.actor:
        # Events name a person by username in actor_label (Actor.for_user), a runtime as
        # "runtime:<name>", the system by its task's name: one exact column for all.
        events = events.filter(actor_label=filters.actor)
    if filters.session:
        events = events.filter(session_key=filters.session)
    if filters.since is not None:
        events = events.filter(created_at__gte=filters.since)
        floor = _seq_bound(filters.since, since=True)
        if floor is not None:
            events = events.filter(seq__gt=floor)
    if filters.until is not None:
        events = events.filter(created_at__lt=filters.until)
        cap = _seq_bound(filters.until, since=False)
        if cap is not None:
            events = events.filter(seq__lt=cap)
    action_branches: list[Q | None] = [Q(action=action) for action in filters.actions] or [None]
    subject_branches: list[QuerySet[AuditEvent]] = [events]
    if filters.subject:
        subject_branches = [
            events.filter(subject=filters.subject),
            events.alias(detail_skill=DETAIL_SKILL).filter(detail_skill=filters.subject),
        ]
    return [
        base if action is None else base.filter(action)
        for base, action in itertools.product(subject_branches, action_branches)
    ]


def _merged(branches: Sequence[QuerySet[AuditEvent]], *, limit: int, descending: bool) -> list[AuditEvent]:
    """The first `limit` events in seq order over every branch, each event once."""
    order = "-seq" if descending else "seq"
    if len(branches) == 1:
        return list(branches[0].order_by(order)[:limit])
    runs = [list(branch.order_by(order)[:limit]) for branch in branches]
    merged = heapq.merge(*runs, key=lambda e: -e.seq if descending else e.seq)
    out: list[AuditEvent] = []
    last = None
    for event in merged:
        if event.seq == last:
            continue
        last = event.seq
        out.append(event)
        if len(out) == limit:
            break
    return out


def event_page(*, filters: LogFilters, before: int | None, size: int = PAGE_SIZE) -> Page[AuditEvent]:
    """One page of the log, newest first: events with seq < `before` (keyset, no OFFSET).

    Reads one row past the page to know whether an older page exists; counts nothing.
    """
    branches = _branches(filters, list_columns=True)
    if before is not None:
        branches = [branch.filter(seq__lt=before) for branch in branches]
    return _keyset(_merged(branches, limit=size + 1, descending=True), size, lambda event: event.seq)


class ExportCursor:
    """The filtered log in seq order, read in keyset chunks (`seq > last`, LIMIT n).

    Built once per export (runtime and time bounds resolved then); `chunk(after)` is one
    short query, so the caller can run each in a worker thread and hold one chunk at a
    time whatever the size of the log.
    """

    def __init__(self, filters: LogFilters) -> None:
        # Events appended while the export runs are left out: it is the log as of its start.
        self.head = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
        self._branches = [b.filter(seq__lte=self.head) for b in _branches(filters, list_columns=False)]

    def chunk(self, after: int, size: int) -> list[AuditEvent]:
        return _merged([b.filter(seq__gt=after) for b in self._branches], limit=size, descending=False)


def runtime_names() -> list[str]:
    return list(AgentRuntime.objects.order_by("name").values_list("name", flat=True)[:500])


def event_get(seq: int) -> AuditEvent | None:
    return AuditEvent.objects.select_related("runtime", "actor").filter(seq=seq).first()


def event_neighbours(seq: int) -> tuple[AuditEvent | None, AuditEvent | None]:
    """The events just before and after `seq` in the chain (seq is gapless unless tampered)."""
    older = AuditEvent.objects.filter(seq__lt=seq).order_by("-seq").only("seq", "action", "hash").first()
    newer = AuditEvent.objects.filter(seq__gt=seq).order_by("seq").only("seq", "action").first()
    return older, newer


def grants_by_id(ids: Iterable[int]) -> dict[int, Grant]:
    wanted = {i for i in ids if isinstance(i, int) and not isinstance(i, bool)}
    grants = Grant.objects.select_related("runtime", "session", "granted_by", "revoked_by", "request")
    return grants.in_bulk(wanted)  # no ids: no query


# --- Escalated grants (S6) ----------------------------------------------------------------------


@dataclass(frozen=True)
class Escalation:
    """An escalated grant with the event that recorded it (S6)."""

    event: AuditEvent
    grant: Grant | None  # None only if the event names no grant this database holds


def escalation_page(
    *, before: int | None, runtime: AgentRuntime | None = None, size: int = ESCALATION_PAGE_SIZE
) -> Page[Escalation]:
    """Escalated grants, newest first, keyed by their audit event's seq.

    Read from the SKILL_GRANT_ESCALATED events (one per escalated grant, written in the
    grant's own transaction, A3) through the (action, seq) index, then their grants by
    primary key: a page is two short queries however many grants exist.
    """
    events = AuditEvent.objects.select_related("runtime", "actor").filter(
        action=AuditAction.SKILL_GRANT_ESCALATED
    )
    if runtime is not None:
        events = events.filter(runtime=runtime)
    if before is not None:
        events = events.filter(seq__lt=before)
    rows = list(events.order_by("-seq")[: size + 1])
    grants = grants_by_id(event.details.get("grant_id") for event in rows[:size])
    escalations = [Escalation(event, grants.get(event.details.get("grant_id"))) for event in rows]
    return _keyset(escalations, size, lambda row: row.event.seq)


def latest_events(*, action: str | None = None, level: str | None = None, size: int = 5) -> list[AuditEvent]:
    events = AuditEvent.objects.select_related("runtime").only(*_LIST_FIELDS)
    if action:
        events = events.filter(action=action)
    if level:
        events = events.filter(level=level)
    return list(events.order_by("-seq")[:size])


# --- In force at a moment ----------------------------------------------------------------------


@dataclass(frozen=True)
class InForce:
    runtime: AgentRuntime
    session: Session | None
    at: dt.datetime
    grants: list[Grant]
    truncated: bool


def grants_in_force_at(*, runtime: AgentRuntime, session: Session | None, at: dt.datetime) -> InForce:
    """The grants in force at `at`: for a session its TURN and SESSION grants and the
    runtime's AGENT grants; for a runtime its AGENT grants.

    In force means created by then, not yet revoked then, and not yet expired then.
    Revoking only ever sets revoked_at (grants are never deleted), so history answers.
    """
    holders = Q(scope=GrantScope.AGENT)
    if session is not None:
        holders |= Q(session=session)
    grants = (
        Grant.objects.filter(holders, runtime=runtime, created_at__lte=at)
        .filter(Q(revoked_at__isnull=True) | Q(revoked_at__gt=at))
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=at))
        .select_related("session", "granted_by", "revoked_by", "request")
        .order_by("scope", "skill", "turn_id", "-created_at")
    )
    rows = list(grants[: IN_FORCE_LIMIT + 1])
    return InForce(runtime, session, at, rows[:IN_FORCE_LIMIT], len(rows) > IN_FORCE_LIMIT)


def session_named(*, runtime: AgentRuntime, session_id: str) -> Session:
    session = Session.objects.filter(runtime=runtime, session_id=session_id).first()
    if session is None:
        raise FilterError("session", UNKNOWN_SESSION_MESSAGE.format(runtime=runtime.name, session=session_id))
    return session
