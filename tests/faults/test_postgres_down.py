"""PostgreSQL goes down under a running web node, then comes back (fail closed).

With the database gone nothing can be decided or recorded: every decision endpoint
answers 503 with a JSON body that says so and a Retry-After, within the connection
pool's timeout, and never an ALLOW. When the database returns, the same node recovers
on its own (no restart), and what was granted before the outage still holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from aimon_admin.core import dbpool
from aimon_admin.core.api import UNAVAILABLE_MESSAGE
from aimon_admin.core.backends.postgresql.base import Breaker
from aimon_admin.core.views import (
    CHECK_LABEL,
    ERROR_MESSAGES,
    ERROR_TITLES,
    MESSAGE_HEADER,
    RETRY_AFTER_SECONDS,
)
from aimon_admin.health import DATABASE_REFUSED_AT_ONCE
from tests.faults.checks import assert_nothing_lost, register_tools
from tests.faults.clients import BackgroundPoll, Person, Recorder, Runtime, database_ready, readiness
from tests.faults.conftest import POOL_TIMEOUT_SECONDS, Node, PrivatePostgres, Product, wait_until
from tests.faults.product import PASSWORD

pytestmark = pytest.mark.postgres

UNAVAILABLE = {"error": "unavailable", "detail": UNAVAILABLE_MESSAGE}
# The pool's wait for a connection, plus a request's own work and the machine's load.
ANSWER_WITHIN_SECONDS = POOL_TIMEOUT_SECONDS + 1.5
RECOVER_WITHIN_SECONDS = 10.0
URL_PASSWORD = "fault-test-url-password"
# The long-poll waiting through the outage: short, since it reads again only at its end.
WAIT_SECONDS = 3


def test_postgres_down_answers_503_never_allow_and_the_node_recovers_by_itself(
    product: Product, private_postgres: PrivatePostgres, start_node: Callable[..., Node]
) -> None:
    # A password in the node's DATABASE_URL (the private cluster trusts every local login, so
    # it is accepted and ignored): /readyz must never show it.
    node: Node = start_node(
        DATABASE_URL=private_postgres.url().replace("postgres@", f"postgres:{URL_PASSWORD}@")
    )
    who = product.run("people", tag="pg")
    node.wait_ready()
    seen = Recorder()
    runtime = Runtime(node.url, who["token"], seen)
    alice = Person(node.url, seen)
    alice.sign_in(who["approver"], PASSWORD)
    register_tools(runtime)
    granted = runtime.open_request(["deploy"], "s-1", who["approver"])
    alice.answer(granted["id"], "ALLOW_SESSION")
    pending = runtime.open_request(["restart"], "s-1", who["approver"])
    assert runtime.skill_decisions(["deploy"], "s-1") == [("deploy", "ALLOW", "SESSION")]
    assert runtime.tool_decision("read_file", "s-1") == ("ALLOW", "READ_ONLY_EXEMPT")

    waiting = BackgroundPoll(node.url, who["token"], seen, pending["id"], wait=WAIT_SECONDS)
    time.sleep(0.3)  # it has read the row once and waits for a wake-up

    private_postgres.stop()

    # The poll that was waiting learns of the outage at its next read, at its deadline (with
    # Redis up it reads only when woken, and no answer can be given without the database):
    # a 503, not a PENDING it would wait on, nor anything it could take for an answer.
    polled = waiting.result()
    assert (polled.status_code, polled.json()) == (503, UNAVAILABLE)
    assert waiting.returned_at is not None
    assert waiting.returned_at - waiting.started_at <= WAIT_SECONDS + ANSWER_WITHIN_SECONDS

    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", "/api/v1/skill-decisions", {"skills": ["deploy"], "session_id": "s-1"}),
        ("POST", "/api/v1/tool-decisions", {"tool": "read_file", "server": None, "session_id": "s-1"}),
        ("POST", "/api/v1/approval-requests", {"skills": ["deploy"], "session_id": "s-1"}),
        ("GET", f"/api/v1/approval-requests/{pending['id']}?wait=5", None),
        ("POST", "/api/v1/sessions/s-1/revoke", {"agent": False}),
    ]
    for method, path, body in calls:
        started = time.monotonic()
        response = runtime.request(method, path, json=body)
        elapsed = time.monotonic() - started
        assert (response.status_code, response.json()) == (503, UNAVAILABLE), (path, response.text)
        assert response.headers["Retry-After"] == "5", path
        assert elapsed <= ANSWER_WITHIN_SECONDS, (path, elapsed)

    # The readiness probe names the database and says why in a few words, never where it is;
    # the liveness probe touches no database and still answers.
    started = time.monotonic()
    ready = readiness(node.url)
    assert time.monotonic() - started <= ANSWER_WITHIN_SECONDS
    assert ready.status_code == 503
    assert ready.json()["status"] == "unavailable"
    database = ready.json()["checks"]["database"]
    assert database["status"] == "failed"
    assert database["error"] in {"connection refused", "timed out", DATABASE_REFUSED_AT_ONCE}, database
    assert URL_PASSWORD not in ready.text
    assert "127.0.0.1" not in ready.text
    assert str(private_postgres.port) not in ready.text
    assert runtime.request("GET", "/healthz").json() == {"status": "ok"}

    private_postgres.start()

    def decides_again() -> bool:
        response = runtime.request(
            "POST", "/api/v1/skill-decisions", json={"skills": ["deploy"], "session_id": "s-1"}
        )
        assert response.status_code in (200, 503), response.text
        if response.status_code == 503:
            assert response.json() == UNAVAILABLE
        return response.status_code == 200

    recovered_in = wait_until(decides_again, RECOVER_WITHIN_SECONDS, "the node to decide again", interval=0.2)
    # The grant made before the outage holds; the revoke refused during it changed nothing.
    assert runtime.skill_decisions(["deploy", "restart"], "s-1") == [
        ("deploy", "ALLOW", "SESSION"),
        ("restart", "ASK", "DEFAULT"),
    ]
    assert runtime.tool_decision("read_file", "s-1") == ("ALLOW", "READ_ONLY_EXEMPT")
    assert database_ready(node.url)
    assert recovered_in <= RECOVER_WITHIN_SECONDS

    # Never an ALLOW, nor any other answer, while the database was down: only 503s.
    outage_5xx = seen.server_errors()
    assert {s.status for s in outage_5xx} == {503}
    assert (
        len([s for s in seen.seen if s.path.startswith("/api/v1/skill-decisions") and s.status == 503]) >= 1
    )
    assert_nothing_lost(product, answered=[granted["id"]], revoked_sessions=[], runtime_id=who["runtime_id"])
    with product.postgres.connect() as db:
        refused = db.execute(
            "SELECT count(*) FROM approvals_approvalrequest WHERE runtime_id = %s", [who["runtime_id"]]
        ).fetchone()[0]
    assert refused == 2  # the request refused during the outage was never half-made


def test_postgres_down_pages_and_answers_are_a_styled_503_and_the_request_page_shows_what_holds(
    product: Product, private_postgres: PrivatePostgres, start_node: Callable[..., Node]
) -> None:
    # The browser's answers must never get a bare HTTP 500 "Something went wrong".
    node: Node = start_node()
    who = product.run("people", tag="pgweb")
    node.wait_ready()
    seen = Recorder()
    runtime = Runtime(node.url, who["token"], seen)
    alice = Person(node.url, seen)
    alice.sign_in(who["approver"], PASSWORD)
    register_tools(runtime)
    answered = runtime.open_request(["deploy"], "s-1", who["approver"])
    alice.answer(answered["id"], "ALLOW_SESSION")
    pending = runtime.open_request(["restart"], "s-1", who["approver"])
    pending_page = f"/approvals/requests/{pending['id']}/"

    private_postgres.stop()

    page = alice.request("GET", "/approvals/")
    assert page.status_code == 503, page.text[:300]
    assert page.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert f"<h1>{ERROR_TITLES[503]}</h1>" in page.text
    assert ERROR_MESSAGES[503] in page.text

    # The answer, as htmx posts it: the toast's words come in a header; the page says the
    # answer may or may not have been saved and links the request's page.
    click = alice.post(f"{pending_page}answer/", {"answer": "ALLOW_SESSION"})
    assert click.status_code == 503, click.text[:300]
    assert click.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert click.headers[MESSAGE_HEADER] == ERROR_MESSAGES["503-post"]
    assert f'href="{pending_page}">{CHECK_LABEL}</a>' in click.text
    for raw in ("Something went wrong", "Traceback", "OperationalError", "PoolTimeout"):
        assert raw not in click.text

    private_postgres.start()
    wait_until(lambda: database_ready(node.url), RECOVER_WITHIN_SECONDS, "the database")

    # What holds: the answer sent during the outage was not saved (the request still offers
    # its answers); the one before it was.
    again = alice.request("GET", pending_page)
    assert again.status_code == 200
    assert 'data-answer="ALLOW_SESSION"' in again.text
    assert 'data-decision="ALLOW"' not in again.text
    before = alice.request("GET", f"/approvals/requests/{answered['id']}/")
    assert 'data-decision="ALLOW"' in before.text
    assert f"by {who['approver']}" in before.text
    alice.answer(pending["id"], "ALLOW_SESSION")
    assert runtime.skill_decisions(["deploy", "restart"], "s-1") == [
        ("deploy", "ALLOW", "SESSION"),
        ("restart", "ALLOW", "SESSION"),
    ]
    # Never a 500 for anyone: only the outage's 503s.
    assert {s.status for s in seen.server_errors()} == {503}


# Twenty runtimes at once, as many as the node's threads and more than its pool's connections.
CONCURRENT = 20


def _decide_at_once(node: Node, token: str, seen: Recorder) -> list[tuple[int, float]]:
    """CONCURRENT skill decisions sent together, each on a client of its own: status and time."""
    results: list[tuple[int, float]] = []
    lock = threading.Lock()
    go = threading.Barrier(CONCURRENT)

    def one() -> None:
        client = Runtime(node.url, token, seen)
        try:
            go.wait()
            started = time.monotonic()
            response = client.request(
                "POST", "/api/v1/skill-decisions", json={"skills": ["deploy"], "session_id": "s-1"}
            )
            with lock:
                results.append((response.status_code, time.monotonic() - started))
        finally:
            client.close()

    threads = [threading.Thread(target=one) for _ in range(CONCURRENT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def test_once_postgres_is_known_down_every_request_is_refused_at_once_and_served_again_soon(
    product: Product, private_postgres: PrivatePostgres, start_node: Callable[..., Node]
) -> None:
    # Fail closed and fast: after the first failure, a 503 with Retry-After without waiting
    # the pool's timeout again (before: each waited it, a web thread held meanwhile, and
    # twenty clients saw 503s after 10-50 s); back within about a second of the database.
    node: Node = start_node()
    who = product.run("people", tag="pg-breaker")
    node.wait_ready()
    seen = Recorder()
    runtime = Runtime(node.url, who["token"], seen)
    assert runtime.skill_decisions(["deploy"], "s-1") == [("deploy", "ASK", "DEFAULT")]

    private_postgres.stop()
    first = runtime.request(
        "POST", "/api/v1/skill-decisions", json={"skills": ["deploy"], "session_id": "s-1"}
    )
    assert (first.status_code, first.json()) == (503, UNAVAILABLE)

    refused = _decide_at_once(node, who["token"], seen)
    assert [status for status, _ in refused] == [503] * CONCURRENT
    times = sorted(elapsed for _, elapsed in refused)
    # Generous, for a loaded machine; waiting out the pool's timeout (2 s here) fails it.
    assert times[len(times) // 2] <= 0.5, times
    assert times[-1] < POOL_TIMEOUT_SECONDS, times

    private_postgres.start()
    started = time.monotonic()

    def decides_again() -> bool:
        response = runtime.request(
            "POST", "/api/v1/skill-decisions", json={"skills": ["deploy"], "session_id": "s-1"}
        )
        assert response.status_code in (200, 503), response.text
        return response.status_code == 200

    wait_until(decides_again, RECOVER_WITHIN_SECONDS, "the node to decide again", interval=0.05)
    assert time.monotonic() - started <= 2 * POOL_TIMEOUT_SECONDS  # a probe, not a caller, found it back
    assert {s.status for s in seen.server_errors()} == {503}


# Connections a busy node's pool holds idle when the database stops; all of them die with it.
DEAD_IDLE = 16


def test_a_probe_gets_past_every_dead_connection_at_once_when_the_database_returns(
    private_postgres: PrivatePostgres,
) -> None:
    # Served again within about a second of the database's return, however many idle
    # connections died. Borrowing alone, the probe met the dead ones one or two a round,
    # sleeping the pool's back-off (at least 0.9 s) between them: sixteen took nine seconds
    # or more, and a busy node came back 1 to 5 s after the database did.
    pool = dbpool.ReconnectingPool(
        private_postgres.url("postgres"),
        min_size=DEAD_IDLE,
        max_size=DEAD_IDLE,
        open=False,
        check=dbpool.ReconnectingPool.check_connection,
    )
    pool.open(wait=True, timeout=30)
    try:
        private_postgres.stop()
        private_postgres.start()
        assert pool.get_stats()["pool_available"] == DEAD_IDLE
        breaker = Breaker()
        breaker.failed(pool)
        recovered_in = wait_until(lambda: not breaker.open, RECOVER_WITHIN_SECONDS, "the probe")
        assert recovered_in <= 2 * POOL_TIMEOUT_SECONDS
        with pool.connection(timeout=5) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()
