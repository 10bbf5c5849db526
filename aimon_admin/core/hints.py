"""Hints sent after a commit, off the request's thread: a wake-up published to Redis, a
task queued for the Celery worker.

A hint only hurries what the database already holds (a waiter re-reads its row, the sweep
finds what is owed), so sending one must never hold the request that made it: with Redis
down, redis-py and kombu spend seconds retrying a connection, and a click or a request
opened would wait for each. In production (a broker, tasks not run eagerly) each hint is
handed to one daemon thread per process, which sends them in order; the request returns
at once. After a send fails, hints are dropped for `DOWN_SECONDS` (one is tried then
again), so an outage costs the thread one failure per window, not one per hint, and the
queue never grows past `QUEUE_MAX`. With tasks run eagerly (the embedded default, the
tests) hints are sent inline, as the caller's own work.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from django.conf import settings

from aimon_admin.core import metrics

logger = logging.getLogger(__name__)

DOWN_SECONDS = 2.0
QUEUE_MAX = 10_000

Hint = tuple[str, Callable[[], None]]

_queue: queue.SimpleQueue[Hint] = queue.SimpleQueue()
_lock = threading.Lock()
_thread: threading.Thread | None = None
_down_until = 0.0


def inline() -> bool:
    """Whether hints are sent by the caller itself: no broker, or tasks run eagerly."""
    return not settings.REDIS_URL or bool(settings.CELERY_TASK_ALWAYS_EAGER)


def send_soon(what: str, send: Callable[[], None]) -> None:
    """Have `send` run soon, never on this thread in production; `what` names it in logs. A
    failure is logged, never raised: the database is the truth, the hint only hurries it."""
    if inline():
        _send(what, send)
        return
    if _queue.qsize() >= QUEUE_MAX:
        _drop(what, "the hint queue is full")
        return
    _queue.put((what, send))
    _ensure_thread()


def _ensure_thread() -> None:
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="aimon-hints", daemon=True)
            _thread.start()


def _run() -> None:
    while True:
        what, send = _queue.get()
        if time.monotonic() < _down_until:
            _drop(what, "Redis was unreachable a moment ago")
            continue
        _send(what, send)


def _send(what: str, send: Callable[[], None]) -> None:
    global _down_until
    try:
        send()
    except Exception as exc:
        _down_until = time.monotonic() + DOWN_SECONDS
        metrics.REDIS_ERRORS.labels("hints").inc()
        logger.warning("could not send %s (%s); hints are dropped for %.0f s", what, exc, DOWN_SECONDS)


def _drop(what: str, why: str) -> None:
    logger.info("dropped %s: %s (the database holds it; a sweep or a re-read finds it)", what, why)
