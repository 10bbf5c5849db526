"""The notification tasks under their names, and the sweep on beat's schedule (P2: with the
queue or a worker down, nothing is lost once beat runs again)."""

from __future__ import annotations

from django.conf import settings

from aimon_admin.celery import app
from aimon_admin.notifications import tasks


def test_every_task_is_registered_under_its_name() -> None:
    app.loader.import_default_modules()
    names = (tasks.FAN_OUT_TASK, tasks.DELIVER_TASK, tasks.DIGEST_TASK, tasks.SWEEP_TASK)
    assert all(name in app.tasks for name in names), sorted(name for name in app.tasks if "notif" in name)


def test_the_sweep_runs_every_ten_seconds_on_beat() -> None:
    # P2: fan-outs owed, sends nobody queued or finished, retries due, digests due.
    entry = settings.CELERY_BEAT_SCHEDULE["notifications-sweep"]
    assert entry == {"task": tasks.SWEEP_TASK, "schedule": 10.0}
