"""Logging helpers: every log line carries the request id it belongs to, a refused request is
one line, not a traceback, and each request and each background task leaves one record.

The request's and the task's records name what was done and by whom, never how: no path, no
header, no cookie, no body, no query string (a token or a password could be in any of them).
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest
from django.utils.functional import LazyObject, empty

from aimon_admin.core.context import current_request_id

request_logger = logging.getLogger("aimon.requests")
task_logger = logging.getLogger("aimon.tasks")


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = current_request_id() or "-"
        return True


class ClientErrorWithoutTraceback(logging.Filter):
    """A 4xx logged by Django (a 403 from a role check, a 400 for a bad host) loses its
    traceback: Django passes the exception it answered, and the log then held a full stack
    for every refusal, which is the product working, not failing. The line itself stays
    (status, path, request id). A 5xx, or any record with no status, keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500 and record.exc_info:
            record.exc_info = None
            record.exc_text = None
        return True


def _caller(request: HttpRequest) -> dict[str, str]:
    """Who made the request, by name: the runtime whose token the API accepted, or the person
    signed in. A person the request never looked up is not looked up for the log."""
    user: Any = getattr(request, "user", None)
    if isinstance(user, LazyObject):
        if user._wrapped is empty:
            return {}
        user = user._wrapped
    runtime = getattr(user, "runtime", None)
    if runtime is not None:
        return {"runtime": runtime.name}
    if user is not None and user.is_authenticated:
        return {"user": user.get_username()}
    return {}


def log_request(request: HttpRequest, status: int, seconds: float) -> None:
    """The request's one record: its id, method, route name, status, time taken and caller.

    The route's name, not the path: a path can carry a secret (a set-password link's token)."""
    match = getattr(request, "resolver_match", None)
    fields: dict[str, Any] = {
        "request_id": getattr(request, "request_id", None),
        "method": request.method,
        "route": match.view_name if match is not None else None,
        "status": status,
        "duration_ms": round(seconds * 1000, 1),
        **_caller(request),
    }
    who = fields.get("runtime") or fields.get("user")
    request_logger.info(
        "%s %s %s %.1f ms%s",
        fields["method"],
        fields["route"] or "(no route)",
        status,
        fields["duration_ms"],
        f" by {who}" if who else "",
        extra=fields,
    )


def log_task(*, name: str, task_id: str, state: str, seconds: float) -> None:
    """A background task's one record: its name, id, final state and time taken."""
    fields = {"task": name, "task_id": task_id, "state": state, "duration_ms": round(seconds * 1000, 1)}
    task_logger.info("task %s %s %.1f ms", name, state, fields["duration_ms"], extra=fields)
