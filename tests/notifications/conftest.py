"""Shared set-up for the notification tests: the product's own address, local receivers
allowed (they run on 127.0.0.1), short time limits, and a request opened with its
after-commit work run as a web request would run it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from aimon_admin.accounts.models import User
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.runtimes.models import AgentRuntime

BASE_URL = "http://aimon.test"


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
