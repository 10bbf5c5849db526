"""Escalation (P2): a request nobody answered in its runtime's time goes to the operators and
the runtime's owner through their channels, and to the organisation's webhooks as
`approval.escalated`, once, whatever their quiet hours and digests.

Real receivers as in test_delivery: a local HTTP server (the webhook verified with the
Standard Webhooks library, chat channels addressed by Apprise's json:// scheme) and aiosmtpd.
Time is the request's own: its `created_at` is moved back, nothing of ours is mocked.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import request_answer, request_cancel
from aimon_admin.approvals.services.escalation import request_escalate_if_due, requests_escalate_due
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import services, tasks
from aimon_admin.notifications.choices import ChannelKind, DeliveryStatus, NotificationEvent
from aimon_admin.notifications.models import Delivery
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_update_settings
from tests.notifications.conftest import BASE_URL, later
from tests.notifications.receivers import HttpReceiver, http_receiver, smtp_server

pytestmark = pytest.mark.django_db

OPS = Actor.system("pytest")
TEN_MINUTES = 600


@pytest.fixture
def escalating(runtime: AgentRuntime, other_approver: User) -> AgentRuntime:
    """agent-one escalates after ten minutes; bob owns it."""
    runtime_update_settings(
        runtime=runtime,
        ceiling=runtime.ceiling,
        exempt_at_or_below=runtime.exempt_at_or_below,
        owner=other_approver,
        description="",
        escalate_after_seconds=TEN_MINUTES,
        actor=OPS,
    )
    runtime.refresh_from_db()
    return runtime


def waited(request: ApprovalRequest, seconds: int) -> ApprovalRequest:
    """The request as if it opened `seconds` ago."""
    ApprovalRequest.objects.filter(pk=request.pk).update(
        created_at=timezone.now() - dt.timedelta(seconds=seconds)
    )
    request.refresh_from_db()
    return request


def chat(user: User, receiver: HttpReceiver) -> None:
    services.channel_add(
        owner=user,
        kind=ChannelKind.APPRISE,
        name="chat",
        target=f"json://{receiver.base}/{user.username}",
        actor=OPS,
    )


def escalation_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=AuditAction.REQUEST_ESCALATED))


# --- Once, to the operators and the owner ---------------------------------------------------------


def test_an_unanswered_request_goes_to_those_who_may_open_it_and_the_webhooks_once(
    escalating: AgentRuntime,
    open_request: Callable[..., ApprovalRequest],
    approver: User,
    other_approver: User,
    operator: User,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # P2: Alice's request waits; after ten minutes the operator (olivia) is told, and the
    # webhook gets approval.escalated. Alice is not told again. P5: bob owns the runtime but
    # may not open a request whose principal is a person here, so he is not told of it.
    with http_receiver() as receiver:
        for user in (approver, other_approver, operator):
            chat(user, receiver)
        _hook, secret = services.webhook_create(name="ops hook", url=receiver.url("/hook"), actor=OPS)
        request = open_request(session_id="s-1", principal="alice")
        receiver.wait(2)  # alice's message and the webhook's approval.requested
        waited(request, TEN_MINUTES + 5)
        with django_capture_on_commit_callbacks(execute=True):  # the escalation's hint
            assert tasks.sweep.apply().get()["escalated"] == 1
        got = receiver.wait(4)
        # A second sweep, a retried task, a read of the request: nothing more.
        with later(60):
            assert tasks.sweep.apply().get() == dict.fromkeys(
                ("escalated", "waiting", "owed", "due", "digests", "reclaimed"), 0
            )
        assert tasks.fan_out.apply(args=[str(request.pk), NotificationEvent.ESCALATED]).get() == 0
        request.refresh_from_db()
        assert request_escalate_if_due(request) is False
    assert len(receiver.got) == 4
    escalated = got[2:]
    assert sorted(g.path for g in escalated) == ["/hook", "/olivia"]
    hook_message = next(g for g in escalated if g.path == "/hook")
    payload = Webhook(secret).verify(hook_message.body, hook_message.headers)
    assert payload["type"] == "approval.escalated"
    assert payload["data"]["request"]["id"] == str(request.pk)
    assert payload["data"]["request"]["status"] == "PENDING"
    assert payload["data"]["request"]["escalated_at"] == request.escalated_at.astimezone(dt.UTC).isoformat()
    olivia = json.loads(next(g for g in escalated if g.path == "/olivia").body)
    assert olivia["title"] == "agent-one is still waiting: deploy"
    assert "Nobody answered in 10 minutes: sent on to the operators" in olivia["message"]
    assert f"{BASE_URL}/approvals/requests/{request.pk}/" in olivia["message"]
    # Marked once, audited once, by the system, with how long it waited.
    assert request.escalated_at is not None
    (event,) = escalation_events()
    assert (event.actor_label, event.subject) == ("request-escalation", str(request.pk))
    assert event.details["escalate_after_seconds"] == TEN_MINUTES
    assert event.details["waited_seconds"] >= TEN_MINUTES
    statuses = set(
        Delivery.objects.filter(request=request, event=NotificationEvent.ESCALATED).values_list(
            "status", flat=True
        )
    )
    assert statuses == {DeliveryStatus.SENT}


def test_only_those_who_may_open_a_request_are_told_of_its_escalation(
    escalating: AgentRuntime,
    open_request: Callable[..., ApprovalRequest],
    approver: User,
    other_approver: User,
    operator: User,
) -> None:  # P5
    assert approver.username == "alice"
    from aimon_admin.approvals.selectors import request_visible_to
    from aimon_admin.notifications.selectors import escalation_recipients_for

    alices = open_request(session_id="s-1", principal="alice")  # a person here: hers and operators'
    unknown = open_request(session_id="s-2", principal="someone-not-here")  # the owner answers it
    told = {
        request.pk: {person.username for person in escalation_recipients_for(request=request)}
        for request in (alices, unknown)
    }
    assert told == {
        alices.pk: {operator.username},
        unknown.pk: {operator.username, other_approver.username},
    }
    for request in (alices, unknown):
        for person in escalation_recipients_for(request=request):
            assert request_visible_to(user=person, pk=request.pk) is not None


def test_nothing_is_escalated_before_its_time_or_without_one(
    escalating: AgentRuntime,
    other_runtime: AgentRuntime,
    open_request: Callable[..., ApprovalRequest],
    runtime: Any,
) -> None:
    # P2: not before the runtime's time; a runtime without one never escalates.
    early = waited(open_request(session_id="s-1", principal="alice"), TEN_MINUTES - 30)
    from aimon_admin.approvals.services import RequestInput, request_create

    never, _ = request_create(RequestInput(runtime=other_runtime, skills=["deploy"], session_id="s-2"))
    waited(never, 20 * 3600)
    assert requests_escalate_due() == 0
    assert request_escalate_if_due(early) is False
    early.refresh_from_db()
    never.refresh_from_db()
    assert (early.escalated_at, never.escalated_at) == (None, None)
    assert escalation_events() == []


def test_an_answered_cancelled_or_expired_request_is_not_escalated(
    escalating: AgentRuntime,
    open_request: Callable[..., ApprovalRequest],
    approver: User,
    django_capture_on_commit_callbacks: Any,
) -> None:
    answered = open_request(session_id="s-1", principal="alice")
    with django_capture_on_commit_callbacks(execute=True):
        request_answer(request=answered, user=approver, answer=Answer.DENY)
    cancelled = open_request(session_id="s-2", principal="alice")
    request_cancel(request=cancelled, actor=OPS)
    expired = open_request(session_id="s-3", principal="alice")
    ApprovalRequest.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    for request in (answered, cancelled, expired):
        waited(request, TEN_MINUTES + 5)
    assert requests_escalate_due() == 0
    assert set(ApprovalRequest.objects.values_list("escalated_at", flat=True)) == {None}
    assert escalation_events() == []


def test_an_escalation_answered_before_it_is_sent_tells_no_person(
    escalating: AgentRuntime, open_request: Callable[..., ApprovalRequest], approver: User, operator: User
) -> None:
    # A person is asked only about what is still open (as for the opening message).
    with http_receiver() as receiver:
        chat(operator, receiver)
        request = waited(open_request(session_id="s-1", principal="alice"), TEN_MINUTES + 5)
        from django.db import transaction

        with transaction.atomic():  # the hook's task would send at once: hold it back
            assert request_escalate_if_due(request) is True
        request_answer(request=request, user=approver, answer=Answer.DENY)
        ids = services.request_fan_out(request_id=str(request.pk), event=NotificationEvent.ESCALATED)
        assert ids == []  # closed by now: nobody is asked
    assert receiver.got == []


# --- Quiet hours and digests never hold an escalation back ----------------------------------------


def test_quiet_hours_and_a_digest_do_not_hold_an_escalation(
    escalating: AgentRuntime,
    open_request: Callable[..., ApprovalRequest],
    operator: User,
    django_capture_on_commit_callbacks: Any,
) -> None:
    now = timezone.now()
    start = (now - dt.timedelta(hours=1)).time().replace(second=0, microsecond=0)
    end = (now + dt.timedelta(hours=1)).time().replace(second=0, microsecond=0)
    services.preference_set(
        user=operator, digest_minutes=30, quiet_start=start, quiet_end=end, timezone_name="UTC", actor=OPS
    )
    with http_receiver() as receiver:
        chat(operator, receiver)
        # No principal: the operators are told when it opens, but olivia is quiet: held.
        request = open_request(session_id="s-1")
        (opened,) = Delivery.objects.filter(request=request, event=NotificationEvent.REQUESTED)
        assert opened.status == DeliveryStatus.HELD
        assert receiver.got == []
        waited(request, TEN_MINUTES + 5)
        with django_capture_on_commit_callbacks(execute=True):
            assert tasks.sweep.apply().get()["escalated"] == 1
        (got,) = receiver.wait(1)
    assert json.loads(got.body)["title"] == "agent-one is still waiting: deploy"
    (escalation,) = Delivery.objects.filter(request=request, event=NotificationEvent.ESCALATED)
    assert (escalation.status, escalation.batched) == (DeliveryStatus.SENT, False)
    opened.refresh_from_db()
    assert opened.status == DeliveryStatus.HELD  # the opening message still waits for its digest


def test_an_escalation_email_arrives_and_says_why(
    escalating: AgentRuntime,
    open_request: Callable[..., ApprovalRequest],
    operator: User,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with smtp_server() as smtp:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = smtp.host, smtp.port
        settings.DEFAULT_FROM_EMAIL = "aimon@example.test"
        services.channel_add(
            owner=operator, kind=ChannelKind.EMAIL, name="work", target="olivia@example.test", actor=OPS
        )
        request = waited(open_request(session_id="s-1", principal="alice"), TEN_MINUTES + 5)
        # Nobody named alice here: the operators were told when it opened, and now again.
        with django_capture_on_commit_callbacks(execute=True):
            assert tasks.sweep.apply().get()["escalated"] == 1
        assert smtp.mailbox.arrived.wait(10)
    opened, message = smtp.mailbox.messages
    assert opened["Subject"] == "agent-one asks for deploy"
    assert message["Subject"] == "agent-one is still waiting: deploy"
    text = message.get_body(("plain",)).get_content()
    html = message.get_body(("html",)).get_content()
    assert "Nobody answered in 10 minutes" in text
    assert "Nobody answered in 10 minutes" in html
    assert f"{BASE_URL}/approvals/requests/{request.pk}/" in text


# --- Where no beat runs (make run): on sight ----------------------------------------------------------


def test_the_inbox_escalates_what_is_due_and_shows_it(
    escalating: AgentRuntime,
    open_request: Callable[..., ApprovalRequest],
    operator: User,
    client: Client,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # make run: Celery eager, no beat. The inbox read escalates, as it expires (S9).
    with http_receiver() as receiver:
        chat(operator, receiver)
        request = waited(open_request(session_id="s-1", principal="alice"), TEN_MINUTES + 5)
        client.force_login(operator)
        with django_capture_on_commit_callbacks(execute=True):  # as after the view's commit
            page = client.get("/approvals/")
        opened, got = receiver.wait(2)  # nobody named alice here: the operators were told at once too
    assert page.status_code == 200
    request.refresh_from_db()
    assert request.escalated_at is not None
    assert json.loads(opened.body)["title"] == "agent-one asks for deploy"
    assert json.loads(got.body)["title"] == "agent-one is still waiting: deploy"
    text = page.content.decode()
    assert "Sent to operators" in text
    assert "nobody answered in 10 minutes" in text
    detail = client.get(f"/approvals/requests/{request.pk}/").content.decode()
    assert "Sent to operators" in detail
    assert len(escalation_events()) == 1


def test_a_runtime_waiting_on_its_request_escalates_it(
    escalating: AgentRuntime, open_request: Callable[..., ApprovalRequest], api: Any
) -> None:
    request = waited(open_request(session_id="s-1", principal="alice"), TEN_MINUTES + 5)
    response = api.get(f"/api/v1/approval-requests/{request.pk}")
    assert response.status_code == 200
    assert response.json()["status"] == "PENDING"  # the runtime still waits; only people are told
    request.refresh_from_db()
    assert request.escalated_at is not None
    assert len(escalation_events()) == 1


def test_the_auditors_escalated_grants_page_does_not_list_it(
    escalating: AgentRuntime, open_request: Callable[..., ApprovalRequest], auditor: User, client: Client
) -> None:
    # Two meanings kept apart: S6's escalated grants are not P2's requests sent to operators.
    request = waited(open_request(session_id="s-1", principal="alice"), TEN_MINUTES + 5)
    assert requests_escalate_due() == 1
    client.force_login(auditor)
    page = client.get("/audit/escalations/")
    assert page.status_code == 200
    assert str(request.pk) not in page.content.decode()
