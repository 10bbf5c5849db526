"""What the waiters of one process share (approvals/api/longpoll.py, approvals/wakeups.py):
one desk for their database work, which reads every row wanted at the same time in one query
on a connection it gives back at once, and one Redis connection for their wake-ups (S7: a
long-poll is answered when the request is).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.test import AsyncClient

from aimon_admin.accounts.models import User
from aimon_admin.approvals import wakeups
from aimon_admin.approvals.api import longpoll
from aimon_admin.approvals.api.longpoll import Desk, Want
from aimon_admin.approvals.choices import Answer, RequestKind
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import request_answer
from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.factories import open_skill_request

transactional = pytest.mark.django_db(transaction=True)  # the desk's thread sees what was committed


def open_requests(runtime: AgentRuntime, user: User, count: int) -> list[ApprovalRequest]:
    return [
        open_skill_request(runtime, "deploy", session_id=f"s-{n}", principal=user.username)
        for n in range(count)
    ]


def want(request: ApprovalRequest, *, runtime_id: int | None = None, kind: str = RequestKind.SKILL) -> Want:
    return Want(runtime_id or request.runtime_id, request.pk, kind, waited=False)


# --- The desk ---------------------------------------------------------------------------------------


@transactional
def test_rows_wanted_together_are_read_in_one_round_with_one_query_for_them_all(
    runtime: AgentRuntime, approver: User, django_assert_num_queries: Any
) -> None:  # S7: a burst of arrivals is read at once, not one by one
    requests = open_requests(runtime, approver, 30)
    request_answer(request=requests[0], user=approver, answer=Answer.DENY)

    async def read_all() -> tuple[list[Any], int]:
        desk = Desk(asyncio.get_running_loop())
        results = await asyncio.gather(*(desk.read(want(request)) for request in requests))
        return results, desk.reads.rounds

    results, rounds = asyncio.run(read_all())
    assert rounds == 1
    assert [snapshot.body["id"] for snapshot in results] == [str(request.pk) for request in requests]
    assert [snapshot.status for snapshot in results] == ["ANSWERED"] + ["PENDING"] * 29

    # The rows and their items: two queries, however many rows (the answered one's record
    # that it was sent is a write of its own).
    again = [want(request) for request in requests[1:]]
    with django_assert_num_queries(2):
        longpoll.read_many(again)


@transactional
def test_a_round_reads_only_a_waiters_own_request_of_its_own_kind(
    runtime: AgentRuntime, other_runtime: AgentRuntime, approver: User
) -> None:
    mine, theirs = open_requests(runtime, approver, 1)[0], open_requests(other_runtime, approver, 1)[0]
    wants = [
        want(mine),
        want(theirs, runtime_id=runtime.pk),  # another runtime's: not found
        want(mine, kind=RequestKind.TOOL),  # a skill request read as a tool request: not found
    ]
    results = longpoll.read_many(wants)
    assert results[0] is not None
    assert results[1:] == [None, None]


@pytest.mark.postgres  # SQLite's in-memory test database is never closed
@transactional
def test_the_desk_gives_its_connection_back_after_each_round(runtime: AgentRuntime, approver: User) -> None:
    request = open_requests(runtime, approver, 1)[0]

    async def read() -> bool:
        desk = Desk(asyncio.get_running_loop())
        await desk.read(want(request))
        await desk.call(lambda: None)
        holds = [
            lane.executor.submit(lambda: connection.connection is not None).result()
            for lane in (desk.reads, desk.calls)
        ]
        return any(holds)

    assert asyncio.run(read()) is False


@pytest.mark.postgres  # SQLite's in-memory test database is never closed
@transactional
def test_a_round_keeps_its_connection_only_for_a_round_queued_already_and_never_after_an_error(
    runtime: AgentRuntime, approver: User
) -> None:
    request = open_requests(runtime, approver, 1)[0]
    longpoll.read_round([want(request)], keep=True)
    assert connection.connection is not None  # the next round of the burst borrows nothing
    longpoll.read_round([want(request)], keep=False)
    assert connection.connection is None

    def down() -> None:
        connection.ensure_connection()
        raise OperationalError("server closed the connection unexpectedly")

    results = longpoll.call_round([down], keep=True)
    assert isinstance(results[0], OperationalError)
    assert connection.connection is None


@transactional
def test_a_database_error_in_a_round_reaches_each_of_its_waiters_and_the_next_round_reads_again(
    runtime: AgentRuntime, approver: User, monkeypatch: pytest.MonkeyPatch
) -> None:  # each of them answers 503, never a decision; the desk goes on
    requests = open_requests(runtime, approver, 3)
    real = longpoll.request_rows
    failures = iter([OperationalError("server closed the connection unexpectedly")])

    def flaky() -> Any:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return real()

    monkeypatch.setattr(longpoll, "request_rows", flaky)

    async def read_twice() -> tuple[list[Any], list[Any]]:
        desk = Desk(asyncio.get_running_loop())
        first = await asyncio.gather(*(desk.read(want(r)) for r in requests), return_exceptions=True)
        second = await asyncio.gather(*(desk.read(want(r)) for r in requests))
        return first, second

    first, second = asyncio.run(read_twice())
    assert all(isinstance(result, OperationalError) for result in first)
    assert [snapshot.status for snapshot in second] == ["PENDING"] * 3


def test_a_database_error_ends_a_round_of_calls_without_trying_the_rest() -> None:
    tried: list[str] = []

    def ok() -> str:
        tried.append("ok")
        return "ok"

    def down() -> str:
        tried.append("down")
        raise OperationalError("could not connect to server")

    def refused() -> str:
        raise ValueError("a call's own failure is its alone")

    results = longpoll.call_round([ok, refused, down, ok])
    assert results[0] == "ok"
    assert isinstance(results[1], ValueError)
    assert isinstance(results[2], OperationalError)
    assert results[3] is results[2]
    assert tried == ["ok", "down"]


@transactional
def test_under_asgi_a_long_poll_authenticates_and_reads_on_its_loops_desk(
    runtime_token: str, runtime: AgentRuntime, approver: User, settings: Any
) -> None:  # S7 under ASGI (what uvicorn serves): the first read, then the one at the deadline
    settings.REDIS_URL = ""
    request = open_requests(runtime, approver, 1)[0]

    async def poll() -> tuple[int, dict[str, Any], int, int]:
        response = await AsyncClient().get(
            f"/api/v1/approval-requests/{request.pk}",
            {"wait": "1"},
            headers={"Authorization": f"Bearer {runtime_token}"},
        )
        desk = longpoll._desks[asyncio.get_running_loop()]
        return response.status_code, response.json(), desk.calls.rounds, desk.reads.rounds

    status, body, calls, reads = asyncio.run(poll())
    assert (status, body["id"], body["status"]) == (200, str(request.pk), "PENDING")
    assert (calls, reads) == (1, 2)


# --- One Redis connection -----------------------------------------------------------------------------


def pubsub_connections_of_this_process(client: Any) -> int:
    mine = f"aimon-wait-{os.getpid()}-"
    return sum(1 for c in client.client_list(_type="pubsub") if c.get("name", "").startswith(mine))


@pytest.mark.redis
def test_every_waiter_of_a_loop_shares_one_redis_connection_and_is_woken_by_its_own_channel(
    redis_url: str, settings: Any
) -> None:  # S7
    import redis

    settings.REDIS_URL = redis_url
    client = redis.Redis.from_url(redis_url)

    async def wait_on_fifty() -> tuple[int, list[bool], int]:
        subscriptions = await asyncio.gather(*(wakeups.subscribe(f"shared-{n}") for n in range(50)))
        assert all(s.repoll_after is None for s in subscriptions)  # every one confirmed
        connections = await asyncio.to_thread(pubsub_connections_of_this_process, client)
        await asyncio.to_thread(client.publish, wakeups.channel_for("shared-7"), b"1")
        woken = await asyncio.gather(*(s.wait(1.0 if n == 7 else 0.3) for n, s in enumerate(subscriptions)))
        for subscription in subscriptions:
            await subscription.close()
        await asyncio.sleep(0.2)  # the UNSUBSCRIBEs reach Redis
        left = sum(
            dict(client.pubsub_numsub(*(wakeups.channel_for(f"shared-{n}") for n in range(50)))).values()
        )
        return connections, list(woken), left

    try:
        connections, woken, left = asyncio.run(wait_on_fifty())
    finally:
        client.close()
    assert connections == 1
    assert woken == [n == 7 for n in range(50)]
    assert left == 0


@pytest.mark.redis
def test_a_lost_connection_wakes_every_waiter_to_read_then_subscribes_again_and_wakes_them_once_more(
    redis_url: str, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:  # S7 with Redis restarting: nothing published meanwhile is missed
    import redis

    settings.REDIS_URL = redis_url
    monkeypatch.setattr(wakeups, "RESUBSCRIBE_FIRST_SECONDS", 0.2)
    client = redis.Redis.from_url(redis_url)
    mine = f"aimon-wait-{os.getpid()}-"

    async def lose_it() -> list[Any]:
        subscriptions = await asyncio.gather(*(wakeups.subscribe(f"lost-{n}") for n in range(3)))
        ids = [c["id"] for c in client.client_list(_type="pubsub") if c.get("name", "").startswith(mine)]
        assert len(ids) == 1
        await asyncio.to_thread(client.client_kill_filter, _id=ids[0])
        lost = await asyncio.gather(*(s.wait(2.0) for s in subscriptions))  # woken to re-read
        polling = [s.repoll_after for s in subscriptions]
        again = await asyncio.gather(*(s.wait(5.0) for s in subscriptions))  # subscribed again
        live = [s.repoll_after for s in subscriptions]
        await asyncio.to_thread(client.publish, wakeups.channel_for("lost-1"), b"1")
        woken = await subscriptions[1].wait(2.0)
        for subscription in subscriptions:
            await subscription.close()
        return [lost, polling, again, live, woken]

    try:
        lost, polling, again, live, woken = asyncio.run(lose_it())
    finally:
        client.close()
    assert lost == [True] * 3
    assert polling == [wakeups.REPOLL_SECONDS] * 3
    assert again == [True] * 3
    assert live == [None] * 3
    assert woken is True
