"""Many long-polls held by one real node: uvicorn serving the ASGI app on PostgreSQL and Redis,
its pool far smaller than the number of waiters (S7: a long-poll is answered when the request
is, however many wait).

A waiter holds no database connection while it waits, nor while it subscribes, and its first
read does not queue for the pool behind every other arrival's: 200 polls arriving together on
a pool of 5 connections (a borrower gives up after 2 s) are all held, none answered 503, and
each is woken with its own request's answer. Redis answers the node `REDIS_DELAY_SECONDS`
late here, as a loaded one does (make prod's fault campaign saw subscriptions take over a
second with 1,000 arriving). Before, each arrival kept the connection it had authenticated
with until its first read, across its own Redis connection's handshake and subscription: the
pool's queue grew past its 2 s and most of the 200 were answered 503. The node now subscribes
them all on one Redis connection.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from aimon_admin.accounts.models import User
from aimon_admin.approvals import wakeups
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import RequestInput, request_answer, request_create
from aimon_admin.runtimes.models import AgentRuntime
from tests.audit.helpers import database_for_new_process
from tests.ports import free_port
from tests.production.helpers import ROOT, Deadline, child_env, stop, tail, wait_for_health

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

WAITERS = 200
POOL_SIZE = 5
POOL_TIMEOUT_SECONDS = 2
REDIS_DELAY_SECONDS = 0.3
WAIT = 60  # far past the test's own length: a poll back before it was woken, not timed out
BUDGET_SECONDS = 120


class DelayedRedis:
    """A TCP relay to the real Redis that hands on what Redis sends `delay` seconds late (in
    order); what the node sends goes through at once. Runs its own loop in a thread."""

    def __init__(self, upstream: str, delay: float) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self.host, self.port, self.path = parts.hostname or "127.0.0.1", parts.port or 6379, parts.path
        self.delay = delay
        self.loop = asyncio.new_event_loop()
        self.listening = threading.Event()
        self.thread = threading.Thread(
            target=self.loop.run_until_complete, args=(self._serve(),), daemon=True
        )
        self.thread.start()
        assert self.listening.wait(10), "the relay did not start"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.listen_port}{self.path}"

    async def _serve(self) -> None:
        self.stopping = asyncio.Event()
        self.relays: set[asyncio.Task[None]] = set()
        server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.listen_port = server.sockets[0].getsockname()[1]
        self.listening.set()
        async with server:
            await self.stopping.wait()
        for relay in self.relays:
            relay.cancel()
        await asyncio.gather(*self.relays, return_exceptions=True)

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.relays.add(task)
        reader, writer = await asyncio.open_connection(self.host, self.port)
        late: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def up() -> None:
            while data := await client_reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        async def down() -> None:
            while data := await reader.read(65536):
                late.put_nowait((self.loop.time() + self.delay, data))
            late.put_nowait((0.0, b""))

        async def deliver() -> None:
            while True:
                due, data = await late.get()
                if not data:
                    break
                await asyncio.sleep(max(due - self.loop.time(), 0))
                client_writer.write(data)
                await client_writer.drain()
            client_writer.close()

        await asyncio.gather(up(), down(), deliver(), return_exceptions=True)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(10)


@pytest.fixture
def node(redis_url: str, tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes], Path]]:
    """One uvicorn process, as make prod runs the wait server, with a pool of POOL_SIZE and a
    Redis that answers it REDIS_DELAY_SECONDS late."""
    port, log = free_port(), tmp_path / "node.log"
    relay = DelayedRedis(redis_url, REDIS_DELAY_SECONDS)
    env = child_env(
        DATABASE_URL=database_for_new_process(),
        REDIS_URL=relay.url,
        DJANGO_SETTINGS_MODULE="aimon_admin.settings.test",
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        CELERY_TASK_ALWAYS_EAGER="1",
        DATABASE_POOL_MIN_SIZE="1",
        DATABASE_POOL_MAX_SIZE=str(POOL_SIZE),
        DATABASE_POOL_TIMEOUT=str(POOL_TIMEOUT_SECONDS),
        LOG_LEVEL="WARNING",
    )
    argv = [sys.executable, "-m", "uvicorn", "aimon_admin.asgi:application", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--lifespan", "off", "--no-access-log", "--log-level", "warning"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_for_health(port, Deadline(30), process, log)
        yield port, process, log
    finally:
        stop(process)
        relay.stop()


class Polls:
    """`?wait=WAIT` long-polls, all sent at once, each on its own connection (one asyncio
    loop in a thread): (status, body) by request id."""

    def __init__(self, port: int, token: str, ids: list[str]) -> None:
        self.port, self.token, self.ids = port, token, ids
        self.results: dict[str, tuple[int, dict]] = {}
        self.thread = threading.Thread(target=asyncio.run, args=(self._all(),), daemon=True)
        self.thread.start()

    async def _one(self, request_id: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(
            f"GET /api/v1/approval-requests/{request_id}?wait={WAIT} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {self.token}\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        raw = await reader.read()
        writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        self.results[request_id] = (int(head.split(b" ", 2)[1]), json.loads(body) if body else {})

    async def _all(self) -> None:
        await asyncio.gather(*(self._one(request_id) for request_id in self.ids))

    def join(self, deadline: Deadline) -> None:
        self.thread.join(max(deadline.left(), 0))
        assert not self.thread.is_alive(), f"{len(self.ids) - len(self.results)} polls never came back"


def test_many_more_waiters_than_connections_are_all_held_and_each_woken_with_its_answer(
    node: tuple[int, subprocess.Popen[bytes], Path],
    runtime: AgentRuntime,
    runtime_token: str,
    approver: User,
    redis_url: str,
    settings,  # type: ignore[no-untyped-def]
) -> None:  # S7
    import redis

    deadline = Deadline(BUDGET_SECONDS)
    port, process, log = node
    settings.REDIS_URL = redis_url  # the answers' wake-ups go through Redis to the node
    requests = [
        request_create(
            RequestInput(runtime=runtime, skills=["deploy"], session_id=f"s-{n}", principal=approver.username)
        )[0]
        for n in range(WAITERS)
    ]
    ids = [str(request.pk) for request in requests]
    polls = Polls(port, runtime_token, ids)

    client = redis.Redis.from_url(redis_url)
    try:
        channels = [wakeups.channel_for(request_id) for request_id in ids]
        while True:  # every poll has subscribed: it is waiting (or was refused)
            counts = dict(client.pubsub_numsub(*channels))
            subscribed = sum(1 for channel in channels if counts.get(channel.encode(), 0) >= 1)
            if subscribed + len(polls.results) >= WAITERS:
                break
            deadline.check(f"waiting for the polls to subscribe ({subscribed} of {WAITERS})")
            time.sleep(0.1)
        early = dict(polls.results)
        assert early == {}, f"{len(early)} polls came back before any answer:\n{tail(log)}"
        # One Redis connection holds every subscription of the node.
        names = [c.get("name", "") for c in client.client_list(_type="pubsub")]
        assert sum(1 for name in names if name.startswith(f"aimon-wait-{process.pid}-")) == 1, names
    finally:
        client.close()

    # Half allowed, half denied: each poll must come back with its own request's answer.
    expected = {}
    for n, request in enumerate(requests):
        answer = Answer.ALLOW_SESSION if n % 2 == 0 else Answer.DENY
        request_answer(request=ApprovalRequest.objects.get(pk=request.pk), user=approver, answer=answer)
        expected[str(request.pk)] = "ALLOW" if n % 2 == 0 else "DENY"
    polls.join(deadline)

    statuses = sorted({status for status, _ in polls.results.values()})
    assert statuses == [200], f"statuses {statuses}:\n{tail(log)}"
    for request_id, (_, body) in polls.results.items():
        assert body["id"] == request_id
        assert body["status"] == "ANSWERED", body
        assert [item["decision"] for item in body["items"]] == [expected[request_id]]
