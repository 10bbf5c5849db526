"""Redis goes down under a running web node, then comes back (S2, S7, S10, A1-A3).

Redis carries only hints and copies (wake-ups, the cache, the broker); PostgreSQL holds
every decision. So with Redis gone, decisions stay exact, every request that can be
answered is answered (no 5xx), and a long-poll falls back to re-reading its row at the
API's re-poll interval; once Redis is back, wake-ups carry answers at once again.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import pytest

from aimon_admin.approvals.wakeups import REPOLL_SECONDS
from aimon_admin.registry.sync.messages import ERROR_NOT_QUEUED
from tests.faults.checks import assert_nothing_lost, register_tools
from tests.faults.clients import BackgroundPoll, Person, Recorder, Runtime
from tests.faults.conftest import Node, PrivateRedis, Product
from tests.faults.product import PASSWORD

pytestmark = pytest.mark.postgres

# The embedded target for answer-to-unblocked with no wake-ups at all (re-poll + a read).
FALLBACK_LIMIT_SECONDS = 1.5
MCP_SERVER = "catalog-redis"
# Clicks land this long after a poll starts: it is subscribed (or, Redis down, sleeping).
CLICK_AFTER_SECONDS = 0.3


def click_and_time(alice: Person, poll: BackgroundPoll, request_id: str) -> tuple[dict, float]:
    """Click Allow-for-this-session while `poll` waits; the poll's body and click-to-unblocked."""
    time.sleep(max(0.0, poll.started_at + CLICK_AFTER_SECONDS - time.monotonic()))
    clicked = time.monotonic()
    alice.answer(request_id, "ALLOW_SESSION")
    response = poll.result()
    assert response.status_code == 200, (response.status_code, response.text)
    assert poll.returned_at is not None
    return response.json(), poll.returned_at - clicked


def assert_allowed_by(body: dict, skill: str, approver: str) -> None:
    assert body["status"] == "ANSWERED"
    assert body["answered_by"] == approver
    assert [(i["skill"], i["decision"], i["scope"]) for i in body["items"]] == [(skill, "ALLOW", "SESSION")]


def test_redis_down_decisions_stay_exact_polls_fall_back_and_wake_ups_resume(
    product: Product, private_redis: PrivateRedis, start_node: Callable[..., Node]
) -> None:
    node: Node = start_node()
    who = product.run(
        "people_and_server",
        tag="redis",
        name=MCP_SERVER,
        args=["-m", "tests.faults.slow_mcp", "--variant-file", "v", "--marker-file", "m"],
        env={},
        queue_sync=False,
    )
    node.wait_ready()
    seen = Recorder()
    runtime = Runtime(node.url, who["token"], seen)
    alice = Person(node.url, seen)
    alice.sign_in(who["approver"], PASSWORD)
    register_tools(runtime)

    # A grant made before the outage (S4), and a long-poll already waiting when Redis goes.
    before = runtime.open_request(["deploy"], "s-before", who["approver"])
    alice.answer(before["id"], "ALLOW_SESSION")
    waiting = runtime.open_request(["restart"], "s-before", who["approver"])
    early_poll = BackgroundPoll(node.url, who["token"], seen, waiting["id"], wait=30)
    time.sleep(0.5)  # subscribed to its wake-ups

    private_redis.stop()

    # S2: the grant made before still ALLOWs; nothing else does.
    assert runtime.skill_decisions(["deploy", "restart", "notify"], "s-before") == [
        ("deploy", "ALLOW", "SESSION"),
        ("restart", "ASK", "DEFAULT"),
        ("notify", "ASK", "DEFAULT"),
    ]
    assert runtime.skill_decisions(["deploy"], "s-other") == [("deploy", "ASK", "DEFAULT")]
    # T7-T9: the gate reads the registry only.
    assert runtime.tool_decision("read_file", "s-before") == ("ALLOW", "READ_ONLY_EXEMPT")
    assert runtime.tool_decision("rm_rf", "s-before") == ("ASK", "DESTRUCTIVE_ALWAYS_ASKS")
    assert runtime.tool_decision("rm_rf", None) == ("DENY", "UNATTENDED_NO_CHANNEL")
    assert runtime.tool_decision("never_registered", "s-before") == ("ASK", "DESTRUCTIVE_ALWAYS_ASKS")

    # The poll that was subscribed when Redis died still gets its answer, by re-reading (S7).
    body, latency = click_and_time(alice, early_poll, waiting["id"])
    assert_allowed_by(body, "restart", who["approver"])
    assert latency <= FALLBACK_LIMIT_SECONDS, latency

    # A request opened and polled during the outage.
    during = runtime.open_request(["backup"], "s-during", who["approver"])
    assert during["status"] == "PENDING"
    body, latency = click_and_time(
        alice, BackgroundPoll(node.url, who["token"], seen, during["id"], wait=30), during["id"]
    )
    assert_allowed_by(body, "backup", who["approver"])
    assert latency <= FALLBACK_LIMIT_SECONDS, latency
    assert runtime.skill_decisions(["backup"], "s-during") == [("backup", "ALLOW", "SESSION")]

    # The pages: a fresh sign-in, the approver's inbox and sessions, the auditor's pages
    # (the auditor's home reads the verification checkpoint's copy in the cache).
    audrey = Person(node.url, seen)
    audrey.sign_in(who["auditor"], PASSWORD)
    for person, path in [
        (alice, "/approvals/"),
        (alice, "/approvals/sessions/"),
        (audrey, "/"),
        (audrey, "/audit/"),
        (audrey, "/audit/events/"),
        (audrey, "/audit/escalations/"),
    ]:
        response = person.request("GET", path)
        assert response.status_code == 200, (path, response.status_code, response.text[:300])

    # A2: the operator's chain check, which reads and writes the checkpoint's cache copy.
    verified = product.manage("verify_audit", "--from-checkpoint", "--record")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "audit chain OK" in verified.stdout

    # An operator's "Sync now": its task cannot reach the queue, so the run fails at once,
    # saying why, instead of a server error and a run left QUEUED (blocking every later sync).
    olivia = Person(node.url, seen)
    olivia.sign_in(who["operator"], PASSWORD)
    clicked = olivia.post(f"/registry/servers/{MCP_SERVER}/sync/", {})
    assert clicked.status_code == 200, clicked.text[:300]
    with product.postgres.connect() as db:
        runs = db.execute(
            "SELECT id, status, error FROM registry_mcpsyncrun WHERE server_id = %s", [who["server_id"]]
        ).fetchall()
        assert [(status, error) for _, status, error in runs] == [("FAILED", ERROR_NOT_QUEUED)]
        events = db.execute(
            "SELECT action, level FROM audit_auditevent WHERE subject = %s AND details->>'run_id' = %s "
            "ORDER BY seq",
            [MCP_SERVER, str(runs[0][0])],
        ).fetchall()
        assert events == [("MCP_SYNC_REQUESTED", "INFO"), ("MCP_SYNC_FAILED", "WARNING")]
    assert ERROR_NOT_QUEUED in olivia.request("GET", f"/registry/servers/{MCP_SERVER}/").text

    # S10: a revoke made during the outage takes effect at once.
    revoke = runtime.request("POST", "/api/v1/sessions/s-before/revoke", json={"agent": False})
    assert revoke.status_code == 200, revoke.text
    assert revoke.json() == {"removed_session": 2, "removed_agent": 0}
    assert runtime.skill_decisions(["deploy", "restart"], "s-before") == [
        ("deploy", "ASK", "DEFAULT"),
        ("restart", "ASK", "DEFAULT"),
    ]

    private_redis.start()

    # Wake-ups resume: each click unblocks its poll before the poll's first re-read was even
    # due (a lost wake-up is only seen by that re-read, REPOLL_SECONDS after the poll began).
    for number in range(3):
        skill = f"resume-{number}"
        opened = runtime.open_request([skill], "s-after", who["approver"])
        poll = BackgroundPoll(node.url, who["token"], seen, opened["id"], wait=30)
        body, latency = click_and_time(alice, poll, opened["id"])
        assert_allowed_by(body, skill, who["approver"])
        assert poll.returned_at is not None
        assert poll.returned_at - poll.started_at < REPOLL_SECONDS, (number, latency)

    assert seen.server_errors() == []
    # A1-A3: every answer kept its grant and its event; the revoke has its event; one chain.
    assert_nothing_lost(
        product,
        answered=[before["id"], waiting["id"], during["id"]],
        revoked_sessions=["s-before"],
        runtime_id=who["runtime_id"],
    )


def _open_and_click(runtime: Runtime, alice: Person, approver: str, label: str) -> tuple[float, float]:
    """How long opening a request and clicking its answer take, each, seen from the client."""
    started = time.monotonic()
    opened = runtime.open_request([label], f"s-{label}", approver)
    opened_in = time.monotonic() - started
    started = time.monotonic()
    alice.answer(opened["id"], "ALLOW_SESSION")
    return opened_in, time.monotonic() - started


def test_with_redis_down_opening_and_answering_take_no_longer(
    product: Product, private_redis: PrivateRedis, start_node: Callable[..., Node]
) -> None:
    # A wake-up and a queued notification are hints, sent off the request's thread: with
    # Redis gone, the request and the click return as fast as with it (they took ~6 s each,
    # redis-py and kombu retrying a connection inside the request).
    node: Node = start_node()
    who = product.run("people", tag="redis-latency")
    node.wait_ready()
    seen = Recorder()
    runtime = Runtime(node.url, who["token"], seen)
    alice = Person(node.url, seen)
    alice.sign_in(who["approver"], PASSWORD)
    _open_and_click(runtime, alice, who["approver"], "warm")
    up = [_open_and_click(runtime, alice, who["approver"], f"up-{n}") for n in range(8)]

    private_redis.stop()
    down = [_open_and_click(runtime, alice, who["approver"], f"down-{n}") for n in range(8)]

    for which in (0, 1):  # the open, the click
        normal = statistics.median(sample[which] for sample in up)
        outage = statistics.median(sample[which] for sample in down)
        slowest = max(sample[which] for sample in down)
        # Generous bounds, so a loaded machine does not fail it; a stall of seconds does.
        assert outage <= 2 * normal + 0.25, (which, up, down)
        assert slowest <= 1.0, (which, down)
    assert seen.server_errors() == []
