"""Two web nodes, one PostgreSQL database and one Redis: what one node writes, the other
holds at once (S2, S4, S10, A2; docs/operations.md, "More than one machine").

Each test starts two uvicorn processes on their own ports against the test database (the
tests are transactional, so what they set up is committed and visible to the nodes) and
talks to them over real HTTP only: people sign in and click on node A, the runtime asks
node B. Nothing is cached per node that could outlive a write on the other one. Bounded:
each test has a 90 s budget, and runs in a fraction of it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest
import redis

from aimon_admin.accounts.models import User
from aimon_admin.approvals import wakeups
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import Session
from aimon_admin.approvals.wakeups import REPOLL_SECONDS
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_verify_chain
from aimon_admin.runtimes.models import AgentRuntime
from tests.audit.helpers import database_for_new_process
from tests.conftest import PASSWORD
from tests.ports import free_port
from tests.production.helpers import (
    BrowserSession,
    Deadline,
    decide,
    request_json,
    start_node,
    stop,
    wait_for_health,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

BUDGET_SECONDS = 90


@dataclass
class Nodes:
    a: int  # where people click
    b: int  # where the runtime asks
    token: str
    redis_url: str
    deadline: Deadline

    def open_request(self, session_id: str, principal: str, skills: list[str]) -> str:
        """The runtime opens an approval request on node B; its id."""
        status, body = request_json(
            self.b,
            "POST",
            "/api/v1/approval-requests",
            {"skills": skills, "session_id": session_id, "principal": principal, "reason": "multi-node test"},
            token=self.token,
        )
        assert (status, body["status"]) == (201, "PENDING"), body
        return body["id"]


@pytest.fixture
def nodes(redis_url: str, runtime_token: str, tmp_path: Path) -> Iterator[Nodes]:
    deadline = Deadline(BUDGET_SECONDS)
    database_url = database_for_new_process()
    ports = (free_port(), free_port())
    logs = [tmp_path / f"node-{name}.log" for name in "ab"]
    processes = [
        start_node(port, database_url, redis_url, log) for port, log in zip(ports, logs, strict=True)
    ]
    try:
        for port, process, log in zip(ports, processes, logs, strict=True):
            wait_for_health(port, deadline, process, log)
        yield Nodes(a=ports[0], b=ports[1], token=runtime_token, redis_url=redis_url, deadline=deadline)
    finally:
        for process in processes:
            stop(process)
    deadline.check("stopping the nodes")


def test_an_answer_clicked_on_node_a_decides_on_node_b_at_once(nodes: Nodes, approver: User) -> None:
    # S4 + Scale: a session ALLOW and a session DENY made on A are what B decides next.
    allow_id = nodes.open_request("s-allow", approver.username, ["deploy"])
    deny_id = nodes.open_request("s-deny", approver.username, ["drop-database"])
    assert decide(nodes.b, nodes.token, "s-allow", ["deploy"]) == {"deploy": ("ASK", "DEFAULT")}
    assert decide(nodes.b, nodes.token, "s-deny", ["drop-database"]) == {"drop-database": ("ASK", "DEFAULT")}

    alice = BrowserSession(nodes.a, approver.username, PASSWORD)
    alice.click(allow_id, Answer.ALLOW_SESSION)
    assert decide(nodes.b, nodes.token, "s-allow", ["deploy", "drop-database"]) == {
        "deploy": ("ALLOW", "SESSION"),
        "drop-database": ("ASK", "DEFAULT"),
    }
    alice.click(deny_id, Answer.DENY)
    assert decide(nodes.b, nodes.token, "s-deny", ["drop-database", "deploy"]) == {
        "drop-database": ("DENY", "SESSION"),
        "deploy": ("ASK", "DEFAULT"),
    }
    # The runtime reads the request itself on B: answered, by alice, as she clicked on A.
    status, body = request_json(nodes.b, "GET", f"/api/v1/approval-requests/{allow_id}", token=nodes.token)
    assert status == 200
    assert (body["status"], body["answered_by"]) == ("ANSWERED", approver.username)
    assert [(i["skill"], i["decision"], i["scope"]) for i in body["items"]] == [
        ("deploy", "ALLOW", "SESSION")
    ]


def test_a_revoke_on_node_a_takes_the_approval_away_on_node_b_at_once(
    nodes: Nodes, approver: User, operator: User, runtime: AgentRuntime
) -> None:
    # S10 + Scale: no node-local cache may outlive a revoke.
    session_request = nodes.open_request("s-1", approver.username, ["deploy"])
    agent_request = nodes.open_request("s-2", operator.username, ["notify"])
    BrowserSession(nodes.a, approver.username, PASSWORD).click(session_request, Answer.ALLOW_SESSION)
    olivia = BrowserSession(nodes.a, operator.username, PASSWORD)
    olivia.click(agent_request, Answer.ALLOW_AGENT)
    # B has just answered ALLOW for both, so anything it kept would be warm.
    for _ in range(3):
        assert decide(nodes.b, nodes.token, "s-1", ["deploy", "notify"]) == {
            "deploy": ("ALLOW", "SESSION"),
            "notify": ("ALLOW", "AGENT"),
        }

    # alice revokes her session's approvals from its page on A (the confirmation's POST).
    session = Session.objects.get(runtime=runtime, session_id="s-1")
    alice = BrowserSession(nodes.a, approver.username, PASSWORD)
    status, _ = alice.send("POST", f"/approvals/sessions/{session.pk}/revoke/", {})
    assert status == 302
    assert decide(nodes.b, nodes.token, "s-1", ["deploy", "notify"]) == {
        "deploy": ("ASK", "DEFAULT"),
        "notify": ("ALLOW", "AGENT"),  # agent-wide: only Revoke agent-wide removes it (S5)
    }

    # The runtime revokes agent-wide through A's API: B no longer allows anywhere.
    status, body = request_json(
        nodes.a, "POST", "/api/v1/sessions/s-2/revoke", {"agent": True}, token=nodes.token
    )
    assert (status, body) == (200, {"removed_session": 0, "removed_agent": 1})
    assert decide(nodes.b, nodes.token, "s-1", ["deploy", "notify"]) == {
        "deploy": ("ASK", "DEFAULT"),
        "notify": ("ASK", "DEFAULT"),
    }
    assert decide(nodes.b, nodes.token, "s-3", ["notify"]) == {"notify": ("ASK", "DEFAULT")}


class Poll(threading.Thread):
    """A runtime's long-poll on one node, in a thread; what it returned and when."""

    def __init__(self, port: int, token: str, request_id: str, wait: int) -> None:
        super().__init__(daemon=True)
        self.conn = HTTPConnection("127.0.0.1", port, timeout=wait + 10)
        self.conn.connect()
        self.path = f"/api/v1/approval-requests/{request_id}?wait={wait}"
        self.token = token
        self.status = 0
        self.body: dict[str, Any] | None = None
        self.returned_at = 0.0
        self.start()

    def run(self) -> None:
        try:
            self.conn.request("GET", self.path, headers={"Authorization": f"Bearer {self.token}"})
            response = self.conn.getresponse()
            self.status, self.body = response.status, json.loads(response.read())
            self.returned_at = time.monotonic()
        finally:
            self.conn.close()


def test_a_long_poll_waiting_on_node_b_wakes_when_the_answer_is_clicked_on_node_a(
    nodes: Nodes, approver: User
) -> None:
    # S7 + Scale: the wake-up travels through Redis; the poll answers long before it would
    # have re-read the row on its own (every REPOLL_SECONDS), and long before `wait` ends.
    alice = BrowserSession(nodes.a, approver.username, PASSWORD)
    client = redis.Redis.from_url(nodes.redis_url)
    try:
        for round_number in range(4):  # the first warms node A's answer path up, untimed
            request_id = nodes.open_request(f"s-{round_number}", approver.username, ["deploy"])
            channel = wakeups.channel_for(request_id)
            poll = Poll(nodes.b, nodes.token, request_id, wait=20)
            while dict(client.pubsub_numsub(channel)).get(channel.encode(), 0) < 1:
                nodes.deadline.check("waiting for the long-poll to subscribe")
                assert poll.is_alive(), (poll.status, poll.body)
                time.sleep(0.005)
            subscribed_at = time.monotonic()
            time.sleep(0.2)  # its first read is done: it waits now, its next re-read ~1 s away
            assert poll.is_alive(), f"the poll returned before the click: {poll.body}"

            alice.click(request_id, Answer.ALLOW_SESSION)
            clicked_at = time.monotonic()  # the answer's response is back: committed, published
            poll.join(10)

            assert not poll.is_alive(), "the long-poll never returned"
            assert poll.status == 200
            assert poll.body is not None
            assert (poll.body["status"], poll.body["answered_by"]) == ("ANSWERED", approver.username)
            assert [(i["skill"], i["decision"], i["scope"]) for i in poll.body["items"]] == [
                ("deploy", "ALLOW", "SESSION")
            ]
            if round_number == 0:
                continue
            # Woken, not re-polled: back with the click (the wake-up is published when the
            # answer commits, before its response is rendered) and before the poll's first
            # re-read could even have started.
            waited = poll.returned_at - subscribed_at
            assert poll.returned_at - clicked_at < 0.25, poll.returned_at - clicked_at
            assert waited < REPOLL_SECONDS, (
                f"returned {waited:.3f} s after subscribing: a re-poll, not a wake-up"
            )
    finally:
        client.close()


def test_the_audit_chain_stays_one_chain_with_both_nodes_writing_at_once(
    nodes: Nodes, approver: User
) -> None:
    # A2 + A3: concurrent clears and answers on both nodes, one contiguous, valid chain.
    request_ids = [nodes.open_request(f"answered-{n}", approver.username, ["deploy"]) for n in range(6)]
    writers_per_node, clears_per_writer = 4, 10
    start = threading.Barrier(2 * writers_per_node + 2)
    errors: list[str] = []

    def clear_sessions(port: int, writer: int) -> None:
        start.wait(timeout=30)
        for number in range(clears_per_writer):
            status, body = request_json(
                port, "POST", f"/api/v1/sessions/w{port}-{writer}-{number}/clear", {}, token=nodes.token
            )
            if (status, body) != (200, {"removed": 0}):
                errors.append(f"clear on {port}: {status} {body}")

    def answer(port: int, mine: list[str]) -> None:
        person = BrowserSession(port, approver.username, PASSWORD)
        start.wait(timeout=30)
        for request_id in mine:
            try:
                person.click(request_id, Answer.ALLOW_SESSION)
            except AssertionError as exc:
                errors.append(f"answer on {port}: {exc}")

    threads = [
        threading.Thread(target=clear_sessions, args=(port, writer))
        for port in (nodes.a, nodes.b)
        for writer in range(writers_per_node)
    ]
    threads += [
        threading.Thread(target=answer, args=(nodes.a, request_ids[:3])),
        threading.Thread(target=answer, args=(nodes.b, request_ids[3:])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(nodes.deadline.left(), 1))
    assert not any(thread.is_alive() for thread in threads), "a writer hung"
    assert errors == []

    clears = AuditEvent.objects.filter(action=AuditAction.SESSION_CLEARED)
    assert clears.count() == 2 * writers_per_node * clears_per_writer
    assert clears.values("request_id").distinct().count() == clears.count()
    answered = AuditEvent.objects.filter(
        action=AuditAction.SKILL_GRANTED, session_key__startswith="answered-"
    )
    assert sorted(answered.values_list("session_key", flat=True)) == [f"answered-{n}" for n in range(6)]

    seqs = list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert AuditEvent.objects.values("prev_hash").distinct().count() == len(seqs)  # no fork
    assert audit_verify_chain() == (len(seqs), None)
