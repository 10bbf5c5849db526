"""The Celery application. Without REDIS_URL tasks run eagerly, in the web process."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.base")

app = Celery("aimon_admin")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
def _mark_task_channel(task_id: str | None = None, **_: object) -> None:
    """Audit events written by a task say they came from a background task."""
    from aimon_admin.core.context import Channel, bind

    bind(channel=Channel.TASK, request_id=f"task-{task_id}" if task_id else None)
