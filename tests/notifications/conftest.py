"""Shared set-up for the notification tests: the product's own address, local receivers
allowed (they run on 127.0.0.1), short time limits, a request opened with its
after-commit work run as a web request would run it, and tasks queued in Redis."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
import redis
from celery import current_app
from django.conf import settings as django_settings
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.runtimes.models import AgentRuntime
from tests.conftest import skip_or_fail

BASE_URL = "http://aimon.test"


@contextlib.contextmanager
def later(seconds: float) -> Iterator[None]:
    """The clock `seconds` ahead, for everything that asks django.utils.timezone."""
    real = timezone.now
    with mock.patch("django.utils.timezone.now", side_effect=lambda: real() + dt.timedelta(seconds=seconds)):
        yield


@pytest.fixture(autouse=True)
def notify_settings(settings: Any) -> None:
    settings.AIMON_BASE_URL = BASE_URL
    settings.AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES = True
    settings.AIMON_NOTIFY_TIMEOUT_SECONDS = 2
    settings.AIMON_NOTIFY_BROKEN_AFTER = 3
    settings.AIMON_NOTIFY_MAX_ATTEMPTS = 4


@pytest.fixture
def open_request(
    runtime: AgentRuntime, django_capture_on_commit_callbacks: Any
) -> Iterator[Callable[..., ApprovalRequest]]:
    """Open a request as the API does; what runs after its commit (the notifications) runs."""

    def open_(**fields: Any) -> ApprovalRequest:
        fields.setdefault("skills", ["deploy"])
        with django_capture_on_commit_callbacks(execute=True):
            request, _ = request_create(RequestInput(runtime=runtime, **fields))
        return request

    return open_


@pytest.fixture
def person(approver: User) -> User:
    return approver


# The broker's queues (kombu keeps each in a Redis list of its name).
QUEUES = ("celery", "notifications")


@pytest.fixture
def queued(settings: Any) -> Iterator[redis.Redis]:
    """Tasks go to Redis (the run's REDIS_URL), not inline; the queues start and end empty."""
    url = django_settings.REDIS_URL
    if not url:
        skip_or_fail("this test needs REDIS_URL (the PostgreSQL + Redis run sets it)")
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        skip_or_fail(f"Redis is not reachable at {url}: {exc}")
    client.delete(*QUEUES)
    was_eager = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = False
    try:
        yield client
    finally:
        current_app.conf.task_always_eager = was_eager
        client.delete(*QUEUES)
        client.close()
