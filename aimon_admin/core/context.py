"""Who is acting and through which door, for the length of one request, command or task.

The audit log records how each change was made (A1): through the browser, the
runtime API, the command line or a background task, and under which request id. The
entry points bind these once; `audit_record` reads them, so no service has to thread
them through its arguments.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import models


class Channel(models.TextChoices):
    BROWSER = "BROWSER", "Browser"
    API = "API", "Runtime API"
    CLI = "CLI", "Command line"
    TASK = "TASK", "Background task"
    SYSTEM = "SYSTEM", "System"


_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("aimon_request_id", default=None)
_channel: contextvars.ContextVar[str] = contextvars.ContextVar("aimon_channel", default=Channel.SYSTEM)


def new_request_id() -> str:
    return uuid.uuid4().hex


def bind(*, channel: str | None = None, request_id: str | None = None) -> None:
    """Set the channel and request id for the rest of the current context."""
    if channel is not None:
        _channel.set(channel)
    if request_id is not None:
        _request_id.set(request_id)


@contextmanager
def bound(*, channel: str, request_id: str | None = None) -> Iterator[None]:
    """Bind channel and request id for a block, restoring the previous values after it."""
    channel_token = _channel.set(channel)
    request_token = _request_id.set(request_id or new_request_id())
    try:
        yield
    finally:
        _channel.reset(channel_token)
        _request_id.reset(request_token)


def enter(*, channel: str, request_id: str | None = None) -> tuple[contextvars.Token, contextvars.Token]:
    """Bind like `bound`, for callers that cannot use a with-block; undo with `leave`."""
    return _channel.set(channel), _request_id.set(request_id or new_request_id())


def leave(tokens: tuple[contextvars.Token, contextvars.Token]) -> None:
    channel_token, request_token = tokens
    _channel.reset(channel_token)
    _request_id.reset(request_token)


def current_request_id() -> str | None:
    return _request_id.get()


def current_channel() -> str:
    return _channel.get()
