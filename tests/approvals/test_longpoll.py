"""The approval long-poll (`GET /api/v1/approval-requests/{id}?wait=N`) over real HTTP:
an answer wakes it at once, in-process on the embedded default and through Redis
pub/sub in production; a lost wake-up costs a re-poll, never a wrong answer; a database
error is a 503, never a decision.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError
from django.test import Client
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.approvals import wakeups
from aimon_admin.approvals.api import longpoll
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import request_answer
from aimon_admin.core.api import UNAVAILABLE_MESSAGE
from tests.approvals.factories import api_decide_skills, api_open_skill_request

CLOSED_REDIS_PORT_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
# A wake-up returns the poll in milliseconds; the bound leaves room for a loaded CI machine
# and is still far below the 30 s re-poll `no_repoll` sets, so only a wake-up meets it.
PROMPTLY = 2.0


class Poll:
    """A long-poll running in its own thread, as a runtime would hold it."""

    def __init__(self, base_url: str, token: str, request_id: str, wait: int) -> None:
        self.url = f"{base_url}/api/v1/approval-requests/{request_id}?wait={wait}"
        self.token = token
        self.wait = wait
        self.status: int | None = None
        self.body: dict[str, Any] | None = None
        self.returned_at: float | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.started_at = time.monotonic()
        self.thread.start()

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        request = urllib.request.Request(self.url, headers=headers)  # noqa: S310 - the live test server
        try:
            with urllib.request.urlopen(request, timeout=self.wait + 15) as response:  # noqa: S310
                self.status, self.body = response.status, json.load(response)
        except urllib.error.HTTPError as exc:
            self.status, self.body = exc.code, json.load(exc)
        self.returned_at = time.monotonic()

    def join(self) -> Poll:
        self.thread.join(self.wait + 20)
        assert not self.thread.is_alive(), "the long-poll never returned"
        return self


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the long-poll to subscribe"
        time.sleep(0.01)


def subscribed_in_process(request_id: str) -> Callable[[], bool]:
    return lambda: bool(wakeups._waiters.get(wakeups.channel_for(request_id)))


@pytest.fixture
def open_request(api: APIClient) -> Callable[..., dict[str, Any]]:
    """Alice's request about deploy in s-1, opened over the API: its body."""

    def open_(**body: Any) -> dict[str, Any]:
        response = api_open_skill_request(api, ["deploy"], session_id="s-1", principal="alice", **body)
        assert response.status_code == 201, response.content
        return response.json()

    return open_


@pytest.fixture
def embedded(settings) -> None:  # type: ignore[no-untyped-def]
    """The embedded default: no Redis, wake-ups in-process (the PostgreSQL run sets REDIS_URL)."""
    settings.REDIS_URL = ""


@pytest.fixture
def no_repoll(monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-poll so rarely that only a wake-up can explain a prompt return."""
    monkeypatch.setattr(wakeups, "REPOLL_SECONDS", 30.0)


def answer(request_id: str, user: User) -> float:
    request_answer(request=ApprovalRequest.objects.get(pk=request_id), user=user, answer=Answer.ALLOW_SESSION)
    return time.monotonic()


def assert_answered_by(poll: Poll, user: User) -> None:
    assert poll.status == 200
    assert poll.body is not None
    assert poll.body["status"] == "ANSWERED"
    assert poll.body["items"] == [{"skill": "deploy", "decision": "ALLOW", "scope": "SESSION"}]
    assert poll.body["answered_by"] == user.username


@pytest.mark.usefixtures("embedded", "no_repoll")
def test_an_answer_wakes_every_waiting_poll_in_process_at_once(
    live_server, runtime_token: str, open_request, approver: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = open_request()
    reads = CountingReads(monkeypatch)
    polls = [Poll(live_server.url, runtime_token, request["id"], wait=20) for _ in range(2)]
    # Both wait: subscribed, and their first reads done (else the answer is read, not woken).
    wait_until(lambda: len(wakeups._waiters.get(wakeups.channel_for(request["id"]), ())) == 2)
    wait_until(lambda: reads.count == 2)
    answered_at = answer(request["id"], approver)
    for poll in polls:
        poll.join()
        assert_answered_by(poll, approver)
        assert poll.returned_at is not None
        assert poll.returned_at - answered_at < PROMPTLY
    assert wakeups.channel_for(request["id"]) not in wakeups._waiters  # unsubscribed
    # The request's timeline says the runtime was woken: sent while waiting.
    woken = ApprovalRequest.objects.get(pk=request["id"])
    assert woken.answer_sent_to_waiter is True
    assert woken.answer_sent_at is not None


@pytest.mark.usefixtures("embedded")
def test_with_nobody_answering_the_poll_returns_pending_after_wait(
    live_server, runtime_token: str, open_request
) -> None:
    request = open_request()
    poll = Poll(live_server.url, runtime_token, request["id"], wait=1).join()
    assert poll.returned_at is not None
    assert 1.0 <= poll.returned_at - poll.started_at < 3.0
    assert (poll.status, poll.body) == (200, request)
    assert ApprovalRequest.objects.get(pk=request["id"]).answer_sent_at is None  # nothing sent yet


@pytest.mark.usefixtures("embedded", "no_repoll")
def test_a_cancel_wakes_the_poll_with_the_cancelled_request(
    live_server, runtime_token: str, open_request, api: APIClient
) -> None:  # S9
    request = open_request()
    poll = Poll(live_server.url, runtime_token, request["id"], wait=20)
    wait_until(subscribed_in_process(request["id"]))
    cancelled = api.post(f"/api/v1/approval-requests/{request['id']}/cancel")
    cancelled_at = time.monotonic()
    poll.join()
    assert poll.returned_at is not None
    assert poll.returned_at - cancelled_at < PROMPTLY
    assert (poll.status, poll.body) == (200, cancelled.json())
    assert poll.body["status"] == "CANCELLED"


@pytest.mark.usefixtures("embedded", "no_repoll")
def test_the_poll_wakes_at_expiry_and_reads_the_request_expired(
    live_server, runtime_token: str, open_request, api: APIClient
) -> None:  # S9
    request = open_request(timeout_seconds=1)
    poll = Poll(live_server.url, runtime_token, request["id"], wait=20).join()
    assert poll.returned_at is not None
    assert poll.returned_at - poll.started_at < 3.0
    assert poll.status == 200
    assert poll.body == {
        **request,
        "status": "EXPIRED",
        "items": [{"skill": "deploy", "decision": "DENY", "scope": "SESSION"}],
    }
    decided = api_decide_skills(api, ["deploy"], session_id="s-1")
    assert decided.json() == {"decisions": [{"skill": "deploy", "decision": "DENY", "source": "SESSION"}]}


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.usefixtures("no_repoll")
def test_an_answer_wakes_the_poll_through_redis_pubsub(
    live_server, runtime_token: str, open_request, approver: User, redis_url: str, settings
) -> None:  # type: ignore[no-untyped-def]
    import redis

    settings.REDIS_URL = redis_url
    request = open_request()
    poll = Poll(live_server.url, runtime_token, request["id"], wait=20)
    channel = wakeups.channel_for(request["id"])
    client = redis.Redis.from_url(redis_url)
    try:
        wait_until(lambda: dict(client.pubsub_numsub(channel)).get(channel.encode(), 0) >= 1)
        assert channel not in wakeups._waiters  # the wake-up can only come through Redis
        answered_at = answer(request["id"], approver)
        poll.join()
        assert poll.returned_at is not None
        assert poll.returned_at - answered_at < PROMPTLY
        assert_answered_by(poll, approver)
        wait_until(lambda: dict(client.pubsub_numsub(channel)).get(channel.encode(), 0) == 0)
    finally:
        client.close()


@pytest.mark.parametrize("lost", ["publish disabled", "redis unreachable"])
def test_a_lost_wake_up_costs_a_re_poll_never_a_wrong_answer(
    live_server,
    runtime_token: str,
    open_request,
    approver: User,
    settings,
    monkeypatch: pytest.MonkeyPatch,
    lost: str,
) -> None:  # type: ignore[no-untyped-def]
    if lost == "publish disabled":
        settings.REDIS_URL = ""
        monkeypatch.setattr(wakeups, "_local_publish", lambda key: None)
    else:
        settings.REDIS_URL = CLOSED_REDIS_PORT_URL  # subscribe and publish both fail
    request = open_request()
    poll = Poll(live_server.url, runtime_token, request["id"], wait=20)
    time.sleep(0.3)  # let it read PENDING and start waiting
    answered_at = answer(request["id"], approver)
    poll.join()
    assert poll.returned_at is not None
    assert poll.returned_at - answered_at < wakeups.REPOLL_SECONDS + PROMPTLY
    assert_answered_by(poll, approver)


@pytest.mark.django_db
@pytest.mark.parametrize("failing_read", [1, 2])
def test_a_database_error_while_polling_is_503_never_a_decision(
    runtime_token: str, open_request, monkeypatch: pytest.MonkeyPatch, settings, failing_read: int
) -> None:  # type: ignore[no-untyped-def]
    settings.REDIS_URL = ""
    request = open_request()
    real_load = longpoll.load
    reads = 0

    def flaky_load(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        if reads >= failing_read:
            raise OperationalError("server closed the connection unexpectedly")
        return real_load(*args, **kwargs)

    monkeypatch.setattr(longpoll, "load", flaky_load)
    monkeypatch.setattr(wakeups, "REPOLL_SECONDS", 0.1)
    response = Client().get(
        f"/api/v1/approval-requests/{request['id']}",
        {"wait": "5"},
        HTTP_AUTHORIZATION=f"Bearer {runtime_token}",
    )
    assert (response.status_code, response.json()) == (
        503,
        {"error": "unavailable", "detail": UNAVAILABLE_MESSAGE},
    )
    assert response["Retry-After"] == "5"
    assert reads == failing_read


@pytest.mark.django_db
def test_a_database_error_while_authenticating_is_503(
    runtime_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(raw: str) -> None:
        raise OperationalError("could not connect to server")

    monkeypatch.setattr("aimon_admin.runtimes.authentication.token_authenticate", down)
    response = Client().get(
        "/api/v1/approval-requests/0f9c0000-0000-4000-8000-000000000000",
        HTTP_AUTHORIZATION=f"Bearer {runtime_token}",
    )
    assert (response.status_code, response.json()["error"]) == (503, "unavailable")


# --- Waiting costs nothing while wake-ups work ----------------------------------------------------


class CountingReads:
    """Counts the long-poll's reads of its row; `then` runs once, right after the first."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, then: Callable[[], None] | None = None) -> None:
        self.count = 0
        self.then = then
        self.real = longpoll.read_one
        monkeypatch.setattr(longpoll, "read_one", self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        snapshot = self.real(*args, **kwargs)
        self.count += 1
        if self.count == 1 and self.then is not None:
            self.then()  # between the waiter's read and its wait
        return snapshot


def subscribed_in_redis(client: Any, request_id: str) -> Callable[[], bool]:
    channel = wakeups.channel_for(request_id)
    return lambda: dict(client.pubsub_numsub(channel)).get(channel.encode(), 0) >= 1


@pytest.mark.postgres
@pytest.mark.redis
def test_a_waiter_with_live_wake_ups_reads_its_row_only_at_start_and_at_its_deadline(
    live_server, runtime_token: str, open_request, redis_url: str, settings, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]  # S7: idle waiters cost the database nothing
    settings.REDIS_URL = redis_url
    request = open_request()
    reads = CountingReads(monkeypatch)
    poll = Poll(live_server.url, runtime_token, request["id"], wait=3).join()
    assert (poll.status, poll.body) == (200, request)
    assert reads.count == 2  # not once a second: the first read, and the one at the deadline


@pytest.mark.usefixtures("embedded", "no_repoll")
def test_a_wake_up_between_the_read_and_the_wait_is_kept_in_process(
    live_server, runtime_token: str, open_request, approver: User, monkeypatch: pytest.MonkeyPatch
) -> None:  # S7: subscribe, then read, then wait
    request = open_request()
    answered: list[float] = []
    CountingReads(monkeypatch, then=lambda: answered.append(answer(request["id"], approver)))
    poll = Poll(live_server.url, runtime_token, request["id"], wait=20).join()
    assert_answered_by(poll, approver)
    assert poll.returned_at is not None
    assert poll.returned_at - answered[0] < PROMPTLY


@pytest.mark.postgres
@pytest.mark.redis
def test_a_wake_up_between_the_read_and_the_wait_is_kept_through_redis(
    live_server, runtime_token: str, open_request, approver: User, redis_url: str, settings, monkeypatch
) -> None:  # type: ignore[no-untyped-def]  # S7: subscribe (confirmed by Redis), then read, then wait
    settings.REDIS_URL = redis_url
    request = open_request()
    answered: list[float] = []
    reads = CountingReads(monkeypatch, then=lambda: answered.append(answer(request["id"], approver)))
    poll = Poll(live_server.url, runtime_token, request["id"], wait=20).join()
    assert_answered_by(poll, approver)
    assert poll.returned_at is not None
    assert poll.returned_at - answered[0] < PROMPTLY
    assert reads.count == 2  # woken: the read that found PENDING, then the one that found the answer


class SlowRedis:
    """The outside world: a Redis that confirms a SUBSCRIBE only after `delay` seconds (or never),
    as a loaded Redis may; every other command is +OK."""

    def __init__(self, delay: float | None) -> None:
        self.delay = delay

    async def serve(self, reader: Any, writer: Any) -> None:
        import asyncio

        while True:
            header = await reader.readline()
            if not header:
                break
            words = []
            for _ in range(int(header[1:])):
                size = int((await reader.readline())[1:])
                words.append((await reader.readexactly(size + 2))[:-2])
            if words[0].upper() != b"SUBSCRIBE":
                writer.write(b"+OK\r\n")
                continue
            if self.delay is None:
                continue
            await asyncio.sleep(self.delay)
            channel = words[1]
            writer.write(b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(channel), channel))
            await writer.drain()
        writer.close()


@pytest.mark.parametrize("delay", [0.5, None])
def test_a_subscription_counts_only_once_redis_has_confirmed_it(settings, delay: float | None) -> None:  # type: ignore[no-untyped-def]
    # S7: a SUBSCRIBE still in flight when the row is read could be overtaken by the click's
    # PUBLISH; so subscribe() returns only once Redis has confirmed it, and a subscription
    # never confirmed is no subscription: the waiter re-reads its row on a timer instead.
    import asyncio

    async def subscribe() -> tuple[float, float | None]:
        server = await asyncio.start_server(SlowRedis(delay).serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
        loop = asyncio.get_running_loop()
        started = loop.time()
        subscription = await wakeups.subscribe("confirm-me")
        took = loop.time() - started
        repoll_after = subscription.repoll_after
        await subscription.close()
        server.close()
        return took, repoll_after

    took, repoll_after = asyncio.run(subscribe())
    if delay is None:
        assert repoll_after == wakeups.REPOLL_SECONDS
    else:
        assert took >= delay
        assert repoll_after is None


@pytest.mark.postgres
@pytest.mark.redis
def test_a_redis_outage_during_the_wait_falls_back_to_re_reading_and_loses_no_answer(
    live_server,
    runtime_token: str,
    open_request,
    approver: User,
    redis_url: str,
    settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # type: ignore[no-untyped-def]  # S7 with Redis gone: the answer is still seen, by re-reading
    import redis

    settings.REDIS_URL = redis_url
    request = open_request()
    client = redis.Redis.from_url(redis_url)
    try:
        poll = Poll(live_server.url, runtime_token, request["id"], wait=20)
        wait_until(subscribed_in_redis(client, request["id"]))
        # The waiters' connection dies (as when Redis restarts); the click's wake-up goes nowhere.
        # (The live server runs each request on a loop of its own: this poll's hub is the one
        # connection this process has subscribed.)
        mine = f"aimon-wait-{os.getpid()}-"
        killed = [c["id"] for c in client.client_list(_type="pubsub") if c.get("name", "").startswith(mine)]
        assert len(killed) == 1
        settings.REDIS_URL = CLOSED_REDIS_PORT_URL  # the answer's wake-up goes nowhere
        client.client_kill_filter(_id=killed[0])
        answered_at = answer(request["id"], approver)
        poll.join()
        assert_answered_by(poll, approver)
        assert poll.returned_at is not None
        assert poll.returned_at - answered_at < wakeups.REPOLL_SECONDS + PROMPTLY
    finally:
        client.close()
