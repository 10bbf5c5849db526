"""Requests sent to the operators (P2) in the inbox and on the operator's home: a count of them
that opens the inbox showing just those, and a filter that reads or says no."""

from __future__ import annotations

import datetime as dt
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals import home as approvals_home
from aimon_admin.approvals import selectors
from aimon_admin.approvals.inbox_filter import BAD_SENT_MESSAGE
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services.escalation import requests_escalate_due
from aimon_admin.runtimes.models import AgentRuntime
from tests.accounts.factories import logged_in
from tests.approvals.factories import open_skill_request
from tests.core.test_home import figures, home, inbox_ids

pytestmark = pytest.mark.django_db


def ask(runtime: AgentRuntime, session_id: str, *, waited: int = 0) -> ApprovalRequest:
    request = open_skill_request(runtime, "deploy", session_id=session_id, principal=None)
    ApprovalRequest.objects.filter(pk=request.pk).update(
        created_at=timezone.now() - dt.timedelta(seconds=waited)
    )
    return ApprovalRequest.objects.get(pk=request.pk)


def test_the_operator_home_counts_the_requests_sent_to_operators_and_opens_them(
    runtime: AgentRuntime, operator: User
) -> None:
    AgentRuntime.objects.filter(pk=runtime.pk).update(escalate_after_seconds=600)
    late = ask(runtime, "s-1", waited=700)
    ask(runtime, "s-2", waited=30)
    assert "requests-sent" not in figures(home(operator))  # none yet: no figure
    assert requests_escalate_due() == 1
    html = home(operator)
    found = figures(html)
    assert found["requests-all"][0] == 2
    count, _shown, url = found["requests-sent"]
    assert count == 1
    assert approvals_home.SENT_LABEL in html
    assert parse_qs(urlsplit(url).query) == {"sent": ["operators"]}
    client = logged_in(operator)
    assert inbox_ids(client, url) == {str(late.pk)}
    page = client.get(url).content.decode()
    assert "Showing requests sent to operators only." in page


def test_a_sent_filter_that_cannot_be_read_is_a_400_naming_it(operator: User) -> None:
    response = logged_in(operator).get("/approvals/?sent=everyone")
    assert response.status_code == 400
    assert BAD_SENT_MESSAGE.format(value="everyone") in response.content.decode().replace("&#x27;", "'")


def test_the_inbox_poll_sees_a_request_sent_to_operators(runtime: AgentRuntime) -> None:
    # The open inbox re-renders when a card gains its "Sent to operators" line.
    AgentRuntime.objects.filter(pk=runtime.pk).update(escalate_after_seconds=600)
    request = ask(runtime, "s-1", waited=700)
    before = selectors.inbox_version([request])
    assert requests_escalate_due() == 1
    request.refresh_from_db()
    assert selectors.inbox_version([request]) != before
