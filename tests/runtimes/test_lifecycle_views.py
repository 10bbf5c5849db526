"""The runtime page's Disable, Enable and Retire: operators only (approvers and auditors
403), a confirmation page before a disable or a retire, each a POST that redirects back
(post/redirect/get) with its audit event; a retired runtime's page shows its settings
without a form and offers no token."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.services import RUNTIME_RETIRED_MESSAGE, runtime_retire
from tests.conftest import TEST_ACTOR
from tests.runtimes.factories import bearer_client

pytestmark = pytest.mark.django_db


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text(response) -> str:  # type: ignore[no-untyped-def]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def last_action() -> str:
    return AuditEvent.objects.order_by("-seq").values_list("action", flat=True).first() or ""


def calls(token: str) -> int:
    return bearer_client(token).get("/api/v1/runtime").status_code


@pytest.mark.parametrize("name", ["runtimes:disable", "runtimes:retire"])
def test_the_confirmations_are_operators_only(
    name: str, runtime: AgentRuntime, operator: User, approver: User, auditor: User
) -> None:
    path = reverse(name, args=[runtime.name])
    page = signed_in(operator).get(path)
    assert page.status_code == 200
    assert 'class="card narrow confirm"' in page.content.decode()
    for other in (approver, auditor):
        client = signed_in(other)
        assert client.get(path).status_code == 403
        assert client.post(path).status_code == 403
        assert client.post(reverse("runtimes:enable", args=[runtime.name])).status_code == 403
    runtime.refresh_from_db()
    assert (runtime.is_active, runtime.retired_at) == (True, None)


def test_disable_then_enable_from_the_runtime_page(
    runtime: AgentRuntime, operator: User, runtime_token: str
) -> None:
    client = signed_in(operator)
    detail = reverse("runtimes:detail", args=[runtime.name])
    assert "Disable…" in text(client.get(detail))
    confirm = text(client.get(reverse("runtimes:disable", args=[runtime.name])))
    assert "Disable agent-one?" in confirm
    assert calls(runtime_token) == 200  # the confirmation page alone changes nothing

    response = client.post(reverse("runtimes:disable", args=[runtime.name]))
    assert response["Location"] == detail
    assert last_action() == AuditAction.RUNTIME_DISABLED
    assert calls(runtime_token) == 401
    page = text(client.get(detail))
    assert "Disabled: its tokens are refused" in page
    assert "Enable" in page

    response = client.post(reverse("runtimes:enable", args=[runtime.name]))
    assert response["Location"] == detail
    assert last_action() == AuditAction.RUNTIME_ENABLED
    assert calls(runtime_token) == 200


def test_retire_lists_the_tokens_it_revokes_then_freezes_the_page(
    runtime: AgentRuntime, operator: User, runtime_token: str
) -> None:
    client = signed_in(operator)
    token = RuntimeToken.objects.get(runtime=runtime)
    confirm = text(client.get(reverse("runtimes:retire", args=[runtime.name])))
    assert f"Token {token.prefix}… (tests) will be revoked" in confirm
    assert "This cannot be undone" in confirm

    response = client.post(reverse("runtimes:retire", args=[runtime.name]))
    detail = reverse("runtimes:detail", args=[runtime.name])
    assert response["Location"] == detail
    assert last_action() == AuditAction.RUNTIME_RETIRED
    assert calls(runtime_token) == 401
    page = client.get(detail).content.decode()
    assert "Retired: its tokens are revoked" in page
    assert 'action="/runtimes/agent-one/settings/"' not in page  # no settings form
    assert "Issue token" not in page
    assert "Disable…" not in page
    assert ">Enable<" not in page
    listed = text(client.get(reverse("runtimes:list")))
    assert "agent-one Writes Read-only" in listed  # the ceiling and threshold in words
    assert "Retired" in listed


def test_a_retired_runtime_refuses_settings_tokens_and_enable_without_a_500(
    runtime: AgentRuntime, operator: User
) -> None:
    runtime_retire(runtime=runtime, actor=TEST_ACTOR)
    client = signed_in(operator)
    before = AuditEvent.objects.count()
    for path, data in (
        (
            reverse("runtimes:settings", args=[runtime.name]),
            {"ceiling": "READ_ONLY", "exempt_at_or_below": "READ_ONLY"},
        ),
        (reverse("runtimes:token-issue", args=[runtime.name]), {"label": "again"}),
        (reverse("runtimes:enable", args=[runtime.name]), {}),
        (reverse("runtimes:disable", args=[runtime.name]), {}),
    ):
        response = client.post(path, data, follow=True)
        assert response.status_code == 200, path
        assert RUNTIME_RETIRED_MESSAGE in response.content.decode(), path
    assert AuditEvent.objects.count() == before  # nothing recorded
    assert not RuntimeToken.objects.filter(runtime=runtime, revoked_at__isnull=True).exists()
    confirm = client.get(reverse("runtimes:retire", args=[runtime.name])).content.decode()
    assert RUNTIME_RETIRED_MESSAGE in confirm
    assert "<form" not in confirm.split('class="card narrow confirm"')[1]
