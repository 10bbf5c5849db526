"""The Celery application. Without REDIS_URL tasks run eagerly, in the web process."""

from __future__ import annotations

import logging.config
import os
import time
from typing import Any

from celery import Celery
from celery.signals import setup_logging, task_postrun, task_prerun, worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.base")

app = Celery("aimon_admin")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# The context each running task replaced, restored when it ends (an eager task runs inside a
# request or a command, whose own events must not be labelled as the task's), and when it began.
_previous: dict[str, tuple[Any, float]] = {}


@setup_logging.connect
def _log_as_the_web_processes_do(**_: object) -> None:
    """The worker and beat log through settings.LOGGING (AIMON_LOG_FORMAT, LOG_LEVEL), as the
    web processes do, instead of Celery's own format: one JSON record per line under make prod."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


@task_prerun.connect
def _mark_task_channel(task_id: str | None = None, **_: object) -> None:
    """Audit events written by a task say they came from a background task."""
    from aimon_admin.core.context import Channel, enter

    tokens = enter(channel=Channel.TASK, request_id=f"task-{task_id}" if task_id else None)
    _previous[task_id or ""] = (tokens, time.perf_counter())


@task_postrun.connect
def _restore_channel(*, task: Any, state: str, task_id: str | None = None, **_: object) -> None:
    from aimon_admin.core.context import leave
    from aimon_admin.core.logging import log_task

    begun = _previous.pop(task_id or "", None)
    if begun is None:
        return
    tokens, started = begun
    # Under the task's own request id, before it is restored.
    log_task(name=task.name, task_id=task_id or "", state=state, seconds=time.perf_counter() - started)
    try:
        leave(tokens)
    except ValueError:  # set in another context (a pool that switched contexts): nothing to undo
        return


@worker_init.connect
def _refuse_without_secrets_key(**_: object) -> None:
    """A worker sends messages and syncs MCP servers with stored secrets: no start without
    their keys (ImproperlyConfigured names the setting)."""
    from django.core.exceptions import ImproperlyConfigured

    from aimon_admin.core.encryption import key_ring

    try:
        key_ring()
    except ImproperlyConfigured as exc:
        # Celery logs and swallows a handler's exceptions; leaving the process is what stops it.
        raise SystemExit(f"celery worker: {exc}") from exc
