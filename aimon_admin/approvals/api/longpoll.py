"""The long-poll's reads (`GET …/approval-requests/{id}?wait=N`, skill and tool requests alike).

A waiter subscribes to its request's wake-ups, reads its row, and waits; woken, at expiry or
at its deadline it reads again (wakeups.py). What it must never do is hold a database
connection, or a place in the pool's queue, while it waits.

Under ASGI (uvicorn: the wait server of `make prod`, everything under `make run`) every waiter
of a process runs on the server's one event loop, and its database work goes to that loop's
`Desk`: two threads (lanes) working in rounds, each round on one borrowed connection given
back at its end (kept for the next round only if that one is queued already). One runs the
calls queued since its last round (waiters' authentications) one after another; the other
reads every row wanted since its last round (first reads, and re-reads of waiters just woken)
in one query. A thousand waiters arriving together are read in a few rounds, not queued one
by one behind each other for the pool; the process's waiters use two connections at most,
and only while rounds run.

Under WSGI (the test client and live server) the request's own thread is held for the whole
wait anyway: its reads run there, one at a time, the connection given back before each wait.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db import DatabaseError, connection
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from aimon_admin.approvals import services, wakeups
from aimon_admin.approvals.api.serializers import request_body
from aimon_admin.approvals.choices import RequestKind, RequestStatus
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services.escalation import request_escalate_if_due
from aimon_admin.approvals.services.request_views import request_answer_sent
from aimon_admin.core import metrics

# Wake this long after `expires_at`, so the re-read finds the request due and expires it.
EXPIRY_SLACK_SECONDS = 0.05
# At most this many rows in one round's query, and calls in one round; the rest wait for the next.
ROWS_PER_ROUND = 500
CALLS_PER_ROUND = 100


@dataclass(frozen=True)
class Want:
    """One read a waiter wants: its runtime's request of this kind; `waited`: it had waited."""

    runtime_id: int
    request_id: uuid.UUID
    kind: str
    waited: bool


@dataclass(frozen=True)
class Snapshot:
    status: str
    body: dict[str, Any]
    seconds_to_expiry: float


def request_rows() -> QuerySet[ApprovalRequest]:
    """Requests with everything rendering and expiry need."""
    return ApprovalRequest.objects.select_related(
        "runtime", "session", "invoking_session", "answered_by"
    ).prefetch_related("items")


def load(
    runtime_id: int, request_id: str | uuid.UUID, kind: str = RequestKind.SKILL
) -> ApprovalRequest | None:
    """The runtime's own request of this kind, or None (a tool request under the skill
    requests' path, and the reverse, is not found)."""
    try:
        pk = request_id if isinstance(request_id, uuid.UUID) else uuid.UUID(request_id)
    except ValueError:
        return None
    return request_rows().filter(runtime_id=runtime_id, pk=pk, kind=kind).first()


def release_connection() -> None:
    """Give the connection back to the pool (inside a test's transaction it must stay)."""
    if not connection.in_atomic_block:
        connection.close()


def settle(approval: ApprovalRequest, want: Want) -> tuple[Snapshot | None, ApprovalRequest | None]:
    """One read of a loaded row, the truth: expire it if due, then render it. Rendered closed
    for the first time, the timeline learns it was sent (woken, if the poll had waited).
    Returns the snapshot and the row as rendered (reloaded if it just expired)."""
    if services.request_expire_if_due(approval):
        reloaded = load(want.runtime_id, want.request_id, want.kind)
        if reloaded is None:  # requests are never deleted; kept for the type checker
            return None, None
        approval = reloaded
    # P2 on sight, as expiry: a runtime waiting on its request is what notices, where no beat runs.
    request_escalate_if_due(approval)
    request_answer_sent(request=approval, waited=want.waited)
    snapshot = Snapshot(
        status=approval.status,
        body=request_body(approval),
        seconds_to_expiry=(approval.expires_at - timezone.now()).total_seconds(),
    )
    return snapshot, approval


def read_one(want: Want, *, release: bool) -> Snapshot | None:
    """A read on the request's own thread (WSGI); `release`: give the connection back after."""
    try:
        approval = load(want.runtime_id, want.request_id, want.kind)
        return None if approval is None else settle(approval, want)[0]
    finally:
        if release:
            release_connection()


def read_many(wants: list[Want]) -> list[Snapshot | Exception | None]:
    """The rows of many waiters in one query, each then settled as `read_one` would; a row's
    own failure (a write that fails) is its waiter's alone."""
    rows = {row.pk: row for row in request_rows().filter(pk__in={want.request_id for want in wants})}
    results: list[Snapshot | Exception | None] = []
    for want in wants:
        row = rows.get(want.request_id)
        if row is None or row.runtime_id != want.runtime_id or row.kind != want.kind:
            results.append(None)
            continue
        try:
            snapshot, rendered = settle(row, want)
        except Exception as exc:
            results.append(exc)
            continue
        if rendered is not None:
            rows[want.request_id] = rendered  # a second waiter on the same request sees it so
        results.append(snapshot)
    return results


def call_round(calls: list[Callable[[], Any]], keep: bool = False) -> list[Any]:
    """A round of calls on one connection: each call's result or the exception it raised, in
    order. A database error (the database is unreachable) ends the round: the calls left get
    it too, rather than each waiting its turn for the pool. The connection is given back at
    the end, unless `keep` (the next round is already queued) and nothing failed."""
    results: list[Any] = []
    failed = True
    try:
        for call in calls:
            try:
                results.append(call())
            except DatabaseError as exc:
                return results + [exc] * (len(calls) - len(results))
            except Exception as exc:
                results.append(exc)
        failed = False
        return results
    finally:
        if failed or not keep:
            release_connection()


def read_round(wants: list[Want], keep: bool = False) -> list[Any]:
    """A round of reads: every row in one query, on one connection given back at its end
    unless `keep` (the next round is already queued) and nothing failed."""
    failed = True
    try:
        results = read_many(wants)
        failed = any(isinstance(result, DatabaseError) for result in results)
        return results
    finally:
        if failed or not keep:
            release_connection()


class Lane:
    """Work of one kind done on one thread in rounds: what is queued while a round runs
    goes in the next one, whole (up to `most` items). A round keeps its connection for the
    next only when that one is queued already: a burst costs one borrow, not one a round."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, run: Callable[[list[Any], bool], list[Any]], most: int
    ) -> None:
        self.loop, self.run, self.most = loop, run, most
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aimon-wait-db")
        self.queue: list[tuple[Any, asyncio.Future[Any]]] = []
        self.worker: asyncio.Task[None] | None = None
        self.rounds = 0  # how many rounds have run (tests count them)

    async def submit(self, item: Any) -> Any:
        future: asyncio.Future[Any] = self.loop.create_future()
        self.queue.append((item, future))
        if self.worker is None:
            self.worker = self.loop.create_task(self._work())
        return await future

    async def _work(self) -> None:
        try:
            while self.queue:
                batch, self.queue = self.queue[: self.most], self.queue[self.most :]
                try:
                    items, keep = [item for item, _ in batch], bool(self.queue)
                    results = await self.loop.run_in_executor(self.executor, self.run, items, keep)
                    if len(results) != len(batch):
                        raise RuntimeError(f"a round of {len(batch)} gave {len(results)} results")
                except Exception as exc:  # the round could not run at all: each waiter is told
                    results = [exc] * len(batch)
                self.rounds += 1
                for (_, future), result in zip(batch, results, strict=True):
                    if future.done():  # its waiter has gone (the client hung up)
                        continue
                    if isinstance(result, BaseException):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self.worker = None


class Desk:
    """The database work of every waiter on one event loop: two lanes, each one thread and at
    most one connection, so that reads never wait behind arrivals' authentications."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.calls = Lane(loop, call_round, CALLS_PER_ROUND)
        self.reads = Lane(loop, read_round, ROWS_PER_ROUND)

    async def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` in the calls' next round, on a connection given back at once."""
        return await self.calls.submit(functools.partial(function, *args))

    async def read(self, want: Want) -> Snapshot | None:
        """The row `want` names, read in one query with every other row wanted by then."""
        return await self.reads.submit(want)


_desks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Desk] = weakref.WeakKeyDictionary()


def desk_for(request: HttpRequest) -> Desk | None:
    """The desk of the loop serving `request` under ASGI; None under WSGI (its own thread reads)."""
    if not isinstance(request, ASGIRequest):
        return None
    loop = asyncio.get_running_loop()
    desk = _desks.get(loop)
    if desk is None:
        desk = _desks[loop] = Desk(loop)
    return desk


async def long_poll(
    desk: Desk | None, runtime_id: int, request_id: uuid.UUID, wait: int, kind: str = RequestKind.SKILL
) -> dict[str, Any] | None:
    """Read the row until it leaves PENDING or `wait` seconds pass.

    Subscribe first, then read: a wake-up published between the read and the wait is then
    kept, not lost. A wake-up only says "read again"; what it carries is never trusted.
    Between wake-ups the row is re-read only at expiry, at the deadline, and every
    `repoll_after` seconds while wake-ups may not come (wakeups.py): waiting costs the
    database nothing while Redis works.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    subscription = await wakeups.subscribe(request_id) if wait > 0 else None
    inline = sync_to_async(read_one)
    waited = False
    try:
        while True:
            want = Want(runtime_id, request_id, kind, waited)
            if desk is not None:
                snapshot = await desk.read(want)
            else:
                waiting = subscription is not None and deadline - loop.time() > 0
                snapshot = await inline(want, release=waiting)
            if snapshot is None:
                return None
            waited = True
            remaining = deadline - loop.time()
            if snapshot.status != RequestStatus.PENDING or subscription is None or remaining <= 0:
                return snapshot.body
            timeout = min(remaining, max(snapshot.seconds_to_expiry, 0) + EXPIRY_SLACK_SECONDS)
            repoll_after = subscription.repoll_after
            metrics.LONG_POLLS_WAITING.inc()
            try:
                await subscription.wait(timeout if repoll_after is None else min(timeout, repoll_after))
            finally:
                metrics.LONG_POLLS_WAITING.dec()
    finally:
        if subscription is not None:
            await subscription.close()
