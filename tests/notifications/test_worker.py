"""A burst of requests with a real Celery worker, PostgreSQL and Redis (P2): a burst of
requests gets each delivery exactly once.

The test opens requests in this process (tasks queued in Redis, not run eagerly), the first
ones before any worker runs (the queue holds them: nothing lost), then starts a prefork
worker with two processes on the test database, taking both queues as make prod's does.
Every request's fan-out is queued once more and the sweep several times, so duplicates
race each other through the queue. Each of the three channels (a signed webhook, an ntfy
and a JSON channel through Apprise) must receive each request exactly once, every delivery
sent on its first attempt.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from standardwebhooks.webhooks import Webhook

from aimon_admin.accounts.models import User
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import services, tasks
from aimon_admin.notifications.choices import ChannelKind, DeliveryStatus, NotificationEvent
from aimon_admin.notifications.models import Delivery
from aimon_admin.runtimes.models import AgentRuntime
from tests.audit.helpers import database_for_new_process
from tests.notifications.receivers import HttpReceiver, http_receiver
from tests.production.helpers import Deadline, child_env, stop

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
BURST = 40
BEFORE_THE_WORKER = 10
BUDGET_SECONDS = 150


def start_worker(database_url: str, redis_url: str, log: Path) -> Any:
    import subprocess

    env = child_env(
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        DJANGO_SETTINGS_MODULE="aimon_admin.settings.test",
        CELERY_TASK_ALWAYS_EAGER="0",
        LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )
    argv = [sys.executable, "-m", "celery", "-A", "aimon_admin", "worker", "-P", "prefork", "-c", "2"]
    argv += [
        "-Q",
        "celery,notifications",
        "-n",
        "notify-burst@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        "WARNING",
    ]
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _ids(receiver: HttpReceiver, path: str) -> list[str]:
    found = []
    for got in receiver.got:
        if got.path != path:
            continue
        body = json.loads(got.body)
        if path == "/hook":
            found.append(body["data"]["request"]["id"])
        else:
            found.append(body["message"].split("/approvals/requests/", 1)[1].split("/", 1)[0])
    return found


def test_a_burst_is_delivered_exactly_once_on_every_channel(
    queued: redis.Redis, runtime: AgentRuntime, approver: User, tmp_path: Path
) -> None:
    deadline = Deadline(BUDGET_SECONDS)
    with http_receiver() as receiver:
        _hook, secret = services.webhook_create(
            name="hook", url=receiver.url("/hook"), actor=Actor.system("pytest")
        )
        for kind_path, url in (
            ("/json", f"json://{receiver.base}/json"),
            ("/", f"ntfy://{receiver.base}/burst"),
        ):
            services.channel_add(
                owner=approver,
                kind=ChannelKind.APPRISE,
                name=kind_path,
                target=url,
                actor=Actor.system("pytest"),
            )
        opened: list[ApprovalRequest] = []

        def open_some(count: int) -> None:
            for _ in range(count):
                n = len(opened)
                request, _ = request_create(
                    RequestInput(runtime=runtime, skills=["deploy"], session_id=f"s-{n}", principal="alice")
                )
                opened.append(request)
                # Duplicates racing through the queue: the fan-out again, and the sweep.
                tasks.fan_out.delay(str(request.pk), NotificationEvent.REQUESTED)
                if n % 10 == 0:
                    tasks.sweep.delay()

        open_some(BEFORE_THE_WORKER)  # no worker yet: the queue holds them
        assert receiver.got == []
        worker = start_worker(database_for_new_process(), django_settings.REDIS_URL, tmp_path / "worker.log")
        try:
            open_some(BURST - BEFORE_THE_WORKER)
            expected = 3 * BURST
            while len(receiver.got) < expected and deadline.left() > 0 and worker.poll() is None:
                receiver.wait(expected, timeout=min(2.0, max(deadline.left(), 0.1)))
            # Whatever else is queued (the duplicates) runs too before we count.
            tasks.sweep.delay()
            receiver.wait(expected + 1, timeout=min(3.0, max(deadline.left(), 0.1)))
        finally:
            stop(worker)
        log = (tmp_path / "worker.log").read_text(errors="replace")
    assert len(receiver.got) == 3 * BURST, log[-3000:]
    every = sorted(str(r.pk) for r in opened)
    assert sorted(_ids(receiver, "/hook")) == every
    assert sorted(_ids(receiver, "/json")) == every
    assert sorted(_ids(receiver, "/")) == every
    for got in receiver.got:
        if got.path == "/hook":
            Webhook(secret).verify(got.body, got.headers)
    rows = list(Delivery.objects.values_list("status", "attempts"))
    assert len(rows) == 3 * BURST
    assert set(rows) == {(DeliveryStatus.SENT, 1)}
