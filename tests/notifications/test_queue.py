"""Each message is queued once, on a queue of its own (P2: delivery never blocks).

Beat's sweep runs every 10 s. It queued every due delivery each time, those already queued
included, so a burst flooded the broker (1,000 answers: 19,681 messages) and request expiry
and MCP syncs, on the same queue, waited behind the flood. A delivery is now taken for
queueing with a lease, so the sweep queues it again only once the lease has lapsed (its
message lost with Redis), the sweep adds nothing to a backlog, and notifications have their
own queue, which make prod's worker takes beside the default one.
"""

from __future__ import annotations

import datetime as dt
import sys

import pytest
import redis
from django.utils import timezone

from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.approvals.tasks import EXPIRE_TASK_NAME
from aimon_admin.audit.tasks import VERIFY_TASK_NAME
from aimon_admin.celery import app
from aimon_admin.core.actors import Actor
from aimon_admin.core.encryption import new_key
from aimon_admin.notifications import services, tasks
from aimon_admin.notifications.choices import NotificationEvent
from aimon_admin.notifications.models import Delivery
from aimon_admin.registry.tasks import FAIL_STALE_TASK_NAME, SYNC_TASK_NAME
from aimon_admin.runtimes.models import AgentRuntime
from tests.notifications.conftest import later
from tests.production.test_launch import prod_module

OPS = Actor.system("pytest")
BURST = 20


def queue_of(name: str) -> str:
    return app.amqp.router.route({}, name)["queue"].name


def test_notification_work_has_a_queue_of_its_own() -> None:
    # P2: a burst of sends never delays request expiry, an MCP sync or the audit check.
    app.loader.import_default_modules()
    for name in (tasks.FAN_OUT_TASK, tasks.DELIVER_TASK, tasks.DIGEST_TASK):
        assert queue_of(name) == "notifications", name
    # The sweep only takes and queues (it never sends): beside expiry, never behind a burst.
    for name in (tasks.SWEEP_TASK, EXPIRE_TASK_NAME, SYNC_TASK_NAME, FAIL_STALE_TASK_NAME, VERIFY_TASK_NAME):
        assert queue_of(name) == "celery", name


def test_make_prods_worker_takes_both_queues() -> None:
    prod = prod_module()
    env = {
        "DATABASE_URL": "postgres://aimon@127.0.0.1:5432/aimon",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "DJANGO_SECRET_KEY": "x" * 50,
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "AIMON_SECRETS_KEY": new_key(),
        "AIMON_NGINX": sys.executable,  # any binary: nginx is not run here
    }
    worker = prod.commands(prod.config_from(env))["worker"]
    assert worker[worker.index("-Q") + 1] == "celery,notifications"


def _due_deliveries(runtime: AgentRuntime, url: str) -> list[int]:
    """BURST requests, each fanned out to a webhook: a delivery due now, not yet queued."""
    services.webhook_create(name="hook", url=url, actor=OPS)
    for n in range(BURST):
        request, _ = request_create(RequestInput(runtime=runtime, skills=["deploy"], session_id=f"s-{n}"))
        services.request_fan_out(request_id=str(request.pk), event=NotificationEvent.REQUESTED)
    return list(Delivery.objects.values_list("pk", flat=True))


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_sweep_queues_a_due_delivery_once_and_again_only_once_its_message_is_lost(
    queued: redis.Redis, runtime: AgentRuntime
) -> None:
    # P2: three sweeps, no worker yet: each delivery is one message on the notifications
    # queue (before: one more per sweep, on the default queue).
    ids = _due_deliveries(runtime, "http://127.0.0.1:9/hook")
    assert len(ids) == BURST
    for _ in range(3):
        tasks.sweep.apply().get()
    assert (queued.llen("notifications"), queued.llen("celery")) == (BURST, 0)
    # Redis lost them (restarted without its data): once their lease lapses, queued again, once.
    from aimon_admin.notifications.services.delivery import QUEUED_LEASE

    queued.delete("notifications")
    lapsed = (QUEUED_LEASE + dt.timedelta(seconds=1)).total_seconds()
    with later(lapsed):
        for _ in range(3):
            tasks.sweep.apply().get()
    assert (queued.llen("notifications"), queued.llen("celery")) == (BURST, 0)
    assert Delivery.objects.filter(lease_until__gt=timezone.now()).count() == BURST


@pytest.mark.postgres
@pytest.mark.django_db
def test_behind_a_backlog_the_sweep_queues_nothing(queued: redis.Redis, runtime: AgentRuntime) -> None:
    # P2: a burst is never made longer by the sweep. Its room taken by a backlog (stand-ins
    # for a burst's messages), it queues nothing; once the backlog is drained, what is due.
    _due_deliveries(runtime, "http://127.0.0.1:9/hook")
    queued.rpush("notifications", *[b"a message of a burst"] * tasks.SWEEP_ROOM)
    assert tasks.sweep.apply().get()["due"] == 0
    assert queued.llen("notifications") == tasks.SWEEP_ROOM
    queued.delete("notifications")
    assert tasks.sweep.apply().get()["due"] == BURST
    assert queued.llen("notifications") == BURST
