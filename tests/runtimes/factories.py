"""Runtimes' API clients for tests: a client presenting a token, and a client for a runtime
with a token issued to it through `token_issue`."""

from __future__ import annotations

from rest_framework.test import APIClient

from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import token_issue
from tests.conftest import TEST_ACTOR


def bearer_client(token: str) -> APIClient:
    """An API client that sends `token` as its bearer token on every call."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def api_client_for(runtime: AgentRuntime, *, label: str = "") -> APIClient:
    """An API client authenticated as `runtime`, with a token newly issued to it."""
    return bearer_client(token_issue(runtime=runtime, actor=TEST_ACTOR, label=label)[1])
