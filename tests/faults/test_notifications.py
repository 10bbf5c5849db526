"""Webhook messages across a Redis outage and a killed worker (P2, P4).

P2: what a request owes its webhooks is owed from the moment the request commits, whatever
Redis or the worker did since: a request opened while Redis was down and answered once it
was back gets both its messages. P4: Standard Webhooks is at-least-once with a stable id: a
worker killed between sending and recording sends the message again under the same
`webhook-id`, and the receiver example in docs/operations.md acts on it once.

A real webhook receiver in this process, a web node, a Celery worker and (for the outage)
Celery beat, on the private PostgreSQL and Redis. The folder's tests share one database:
each looks only at its own webhook's deliveries.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from standardwebhooks.webhooks import Webhook

from aimon_admin.core.hooks import REQUEST_OPENED
from tests.faults.clients import Person, Recorder, Runtime
from tests.faults.conftest import BIN, ROOT, Node, PrivateRedis, Process, Product, wait_until
from tests.faults.product import PASSWORD
from tests.notifications.receivers import Received, http_receiver

pytestmark = pytest.mark.postgres

# Beat's sweep runs every 10 s; a message owed from the outage goes out at its first or
# second run after Redis is back (its worker and beat reconnecting included).
OWED_SENT_WITHIN_SECONDS = 60.0
HINT_FAILS_WITHIN_SECONDS = 10.0
SENT_WITHIN_SECONDS = 30.0
OPERATIONS = ROOT / "docs" / "operations.md"


@pytest.fixture
def start_beat(product: Product, tmp_path: Path) -> Iterator[Callable[[], Process]]:
    """Celery beat as make prod runs it, its schedule file in the test's folder."""
    started: list[Process] = []

    def start() -> Process:
        process = Process(
            [str(BIN / "celery"), "-A", "aimon_admin", "beat", "--loglevel", "WARNING",
             "--schedule", str(tmp_path / "celerybeat-schedule")],
            product.env(),
            tmp_path / "beat.log",
        )  # fmt: skip
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def verified(secret: str, got: list[Received]) -> list[tuple[str, str, str]]:
    """Each message verified with the endpoint's secret: (type, request id, webhook-id)."""
    out = []
    for message in got:
        payload = Webhook(secret).verify(message.body, message.headers)
        out.append((payload["type"], payload["data"]["request"]["id"], message.headers["webhook-id"]))
    return out


def test_a_request_opened_while_redis_was_down_and_answered_after_gets_both_messages(
    product: Product,
    private_redis: PrivateRedis,
    start_node: Callable[..., Node],
    start_worker: Callable[..., Process],
    start_beat: Callable[[], Process],
) -> None:
    # P2: the opening's hint to the worker is lost with Redis; the answer comes once Redis is
    # back. Both messages are owed from their commits and sent, each once.
    with http_receiver() as receiver:
        who = product.run("people", tag="owed")
        hook = product.run("webhook", name="owed-hook", url=receiver.url("/hook"))
        node = start_node()
        worker = start_worker()
        start_beat()
        node.wait_ready()
        seen = Recorder()
        runtime = Runtime(node.url, who["token"], seen)
        alice = Person(node.url, seen)
        alice.sign_in(who["approver"], PASSWORD)

        private_redis.stop()
        opened = runtime.open_request(["deploy"], "s-owed", who["approver"])
        assert opened["status"] == "PENDING"
        wait_until(
            lambda: f"could not send {REQUEST_OPENED} for {opened['id']}" in node.process.output(),
            HINT_FAILS_WITHIN_SECONDS,
            "the opening's hint to fail",
        )
        private_redis.start()
        alice.answer(opened["id"], "ALLOW_SESSION")

        def both_sent() -> bool:
            assert worker.alive(), worker.output()[-3000:]
            return len(receiver.got) >= 2

        wait_until(both_sent, OWED_SENT_WITHIN_SECONDS, "approval.requested and approval.answered")
        got = verified(hook["secret"], receiver.got)
    assert sorted((kind, request_id) for kind, request_id, _ in got) == [
        ("approval.answered", opened["id"]),
        ("approval.requested", opened["id"]),
    ]
    with product.postgres.connect() as db:
        rows = db.execute(
            "SELECT event, status, attempts FROM notifications_delivery "
            "WHERE request_id = %s AND channel_id = %s ORDER BY event",
            [opened["id"], hook["id"]],
        ).fetchall()
    assert rows == [("ANSWERED", "SENT", 1), ("REQUESTED", "SENT", 1)]
    assert seen.server_errors() == []


def delivery_row(db: psycopg.Connection, request_id: str, channel_id: int) -> tuple[str, int]:
    """The status and recorded attempts of the request's delivery to the channel."""
    return db.execute(
        "SELECT status, attempts FROM notifications_delivery WHERE request_id = %s AND channel_id = %s",
        [request_id, channel_id],
    ).fetchone()


def receiver_example() -> str:
    """The receiver example in docs/operations.md (its Python block under the heading)."""
    text = OPERATIONS.read_text()
    section = text.split("### Receiving webhooks", 1)
    assert len(section) == 2, "docs/operations.md has no 'Receiving webhooks' section"
    match = re.search(r"```python\n(.*?)```", section[1], re.S)
    assert match, "the 'Receiving webhooks' section has no Python example"
    return match.group(1)


def test_a_send_cut_off_by_a_killed_worker_is_sent_again_with_the_same_webhook_id(
    product: Product,
    start_node: Callable[..., Node],
    start_worker: Callable[..., Process],
    tmp_path: Path,
) -> None:
    # P4: the receiver has the message; the worker dies before it can record that it was
    # sent. The delivery is sent again, the same webhook-id both times, and a receiver that
    # dedupes by it (docs/operations.md's example) acts on it once.
    with http_receiver(hang=True) as receiver:
        who = product.run("people", tag="resend")
        hook = product.run("webhook", name="resend-hook", url=receiver.url("/hook"))
        node = start_node()
        first = start_worker()
        node.wait_ready()
        runtime = Runtime(node.url, who["token"], Recorder())
        opened = runtime.open_request(["deploy"], "s-resend", who["approver"])
        wait_until(lambda: len(receiver.got) == 1, SENT_WITHIN_SECONDS, "the first send")
        first.kill()  # its whole group, mid-send: nothing is recorded
        receiver.hang = False
        receiver.release.set()
        with product.postgres.connect() as db:
            assert delivery_row(db, opened["id"], hook["id"]) == ("SENDING", 0)
            # Its lease runs out (the send's time limit x 3 + 30 s; not waited for here).
            db.execute(
                "UPDATE notifications_delivery SET lease_until = now() - interval '1 second' "
                "WHERE request_id = %s AND channel_id = %s",
                [opened["id"], hook["id"]],
            )
        start_worker()
        assert product.run("sweep")["reclaimed"] == 1
        wait_until(lambda: len(receiver.got) == 2, SENT_WITHIN_SECONDS, "the send again")
        got = list(receiver.got)
    (kind, request_id, first_id), (_, _, second_id) = verified(hook["secret"], got)
    assert (kind, request_id) == ("approval.requested", opened["id"])
    assert first_id == second_id
    with product.postgres.connect() as db:
        assert delivery_row(db, opened["id"], hook["id"]) == ("SENT", 1)

    namespace: dict[str, Any] = {}
    exec(compile(receiver_example(), str(OPERATIONS), "exec"), namespace)  # noqa: S102
    acted: list[dict[str, Any]] = []
    namespace["act_on"] = lambda message, db: acted.append(message)
    db = sqlite3.connect(tmp_path / "receiver.sqlite3")
    try:
        outcomes = [namespace["receive"](g.body, g.headers, hook["secret"], db) for g in got]
    finally:
        db.close()
    assert outcomes == [True, False]
    assert [message["type"] for message in acted] == ["approval.requested"]
