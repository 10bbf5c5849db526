"""Undo on the inbox's line for a request just answered (S14): offered on an allow its
reader's answer wrote, with its effect beside the button; a plain form redirects to the inbox
with what happened, htmx gets the line redrawn; anyone else's is a 404."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from aimon_admin.accounts.models import User
from aimon_admin.approvals import policy
from aimon_admin.approvals.models import ApprovalRequest, Grant
from aimon_admin.approvals.services.errors import UNDO_TOO_LATE_MESSAGE
from aimon_admin.approvals.session_views import GRANT_GONE_MESSAGE, UNDONE_MESSAGE
from aimon_admin.approvals.views import UNDO_EFFECT
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime
from tests.accounts.factories import logged_in
from tests.approvals.factories import open_skill_request, skill_decisions

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}
UNDONE = UNDONE_MESSAGE.format(how="Allow for this session", label="deploy", runtime="agent-one")


def answer(client: Client, request: ApprovalRequest, answer: str, **fields: str) -> None:
    response = client.post(reverse("approvals:answer", args=[request.pk]), {"answer": answer, **fields})
    assert response.status_code == 302


def line_of(page: str, request: ApprovalRequest) -> str:
    found = re.search(rf'<li data-request="{request.pk}">(.*?)</li>', page, re.S)
    assert found is not None, f"no line for {request.pk}"
    return found.group(1)


def undo_url(grant: Grant) -> str:
    return reverse("approvals:grant-undo", args=[grant.pk])


@pytest.fixture
def allowed(runtime: AgentRuntime, approver: User) -> tuple[Client, ApprovalRequest, Grant]:
    """alice's request for deploy, answered by her: Allow for this session."""
    client = logged_in(approver)
    request = open_skill_request(runtime, "deploy")
    answer(client, request, "ALLOW_SESSION")
    return client, request, Grant.objects.get(request=request)


def test_the_line_offers_undo_of_the_allow_with_its_effect_written_beside_it(
    allowed: tuple[Client, ApprovalRequest, Grant],
) -> None:  # S14, S5
    client, request, grant = allowed
    line = line_of(client.get(reverse("approvals:inbox")).content.decode(), request)
    assert "<summary" in line
    assert "Undo…" in line
    assert f'action="{undo_url(grant)}"' in line
    assert f'hx-post="{undo_url(grant)}"' in line
    effect = UNDO_EFFECT.format(
        how="Allow for this session",
        label="deploy",
        where="in session s-1",
        runtime="agent-one",
        told="agent-one may already have been told Allow",
    )
    assert escape(effect) in line


def test_a_plain_form_undoes_and_the_inbox_says_so(
    allowed: tuple[Client, ApprovalRequest, Grant], runtime: AgentRuntime
) -> None:  # S14
    client, request, grant = allowed
    response = client.post(undo_url(grant))
    assert response.status_code == 302
    assert response["Location"] == reverse("approvals:inbox")
    page = client.get(reverse("approvals:inbox")).content.decode()
    assert escape(UNDONE) in page
    line = line_of(page, request)
    assert 'data-testid="undone"' in line
    assert "<form" not in line  # nothing left to undo
    assert skill_decisions(runtime, "deploy") == {"deploy": ("ASK", "DEFAULT")}
    assert AuditEvent.objects.filter(action=AuditAction.GRANT_REVOKED, details__undo=True).count() == 1


def test_htmx_gets_the_line_redrawn_with_what_happened(
    allowed: tuple[Client, ApprovalRequest, Grant],
) -> None:  # S14
    client, request, grant = allowed
    response = client.post(undo_url(grant), headers=HTMX)
    assert response.status_code == 200
    body = response.content.decode()
    assert body.strip().startswith(f'<li data-request="{request.pk}">')
    assert "<html" not in body
    assert escape(UNDONE) in body
    assert 'data-testid="undone"' in body
    assert "<form" not in body
    assert Grant.objects.get(pk=grant.pk).revoked_at is not None


def test_a_stale_undo_from_another_tab_says_it_was_no_longer_in_force(
    allowed: tuple[Client, ApprovalRequest, Grant],
) -> None:  # S14
    client, request, grant = allowed
    client.post(undo_url(grant), headers=HTMX)
    body = client.post(undo_url(grant), headers=HTMX).content.decode()
    assert escape(GRANT_GONE_MESSAGE) in body
    assert "revoked by you" in line_of(body, request)
    assert AuditEvent.objects.filter(action=AuditAction.GRANT_REVOKED).count() == 1


def test_too_late_is_said_and_changes_nothing(
    allowed: tuple[Client, ApprovalRequest, Grant],
) -> None:  # S14
    client, request, grant = allowed
    Grant.objects.filter(pk=grant.pk).update(
        created_at=timezone.now() - policy.JUST_ANSWERED_FOR - dt.timedelta(seconds=1)
    )
    too_late = escape(UNDO_TOO_LATE_MESSAGE.format(minutes=10))
    body = client.post(undo_url(grant), headers=HTMX).content.decode()
    assert too_late in body
    assert "toast-error" in body
    assert too_late in client.get(client.post(undo_url(grant))["Location"]).content.decode()
    assert Grant.objects.get(pk=grant.pk).revoked_at is None
    # and the line no longer offers it
    assert "<summary" not in line_of(client.get(reverse("approvals:inbox")).content.decode(), request)


def test_someone_elses_grant_is_not_found_and_stays(
    allowed: tuple[Client, ApprovalRequest, Grant], other_approver: User, operator: User
) -> None:  # S14, S13
    _, _, grant = allowed
    for someone_else in (other_approver, operator):
        assert logged_in(someone_else).post(undo_url(grant), headers=HTMX).status_code == 404
        assert logged_in(someone_else).post(undo_url(grant)).status_code == 404
    assert Grant.objects.get(pk=grant.pk).revoked_at is None


def test_undo_is_a_post(allowed: tuple[Client, ApprovalRequest, Grant]) -> None:
    client, _, grant = allowed
    assert client.get(undo_url(grant)).status_code == 405
    assert Grant.objects.get(pk=grant.pk).revoked_at is None


def test_a_deny_offers_no_undo(runtime: AgentRuntime, approver: User) -> None:  # S14
    client = logged_in(approver)
    denied = open_skill_request(runtime, "deploy")
    answer(client, denied, "DENY")
    page = client.get(reverse("approvals:inbox")).content.decode()
    line = line_of(page, denied)
    assert "Deny" in line
    assert "<summary" not in line


def test_only_the_allows_of_a_mixed_answer_offer_undo(runtime: AgentRuntime, approver: User) -> None:  # S14
    client = logged_in(approver)
    request = open_skill_request(runtime, "deploy", "wipe")
    answer(client, request, "ALLOW_SESSION", skill="deploy")
    answer(client, request, "DENY", skill="wipe")
    line = line_of(client.get(reverse("approvals:inbox")).content.decode(), request)
    assert 'data-testid="undo-deploy"' in line
    assert 'data-testid="undo-wipe"' not in line
    assert "Undo deploy…" in line  # named, as the line holds two answers
