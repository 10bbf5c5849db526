"""Delivery to real receivers, and bad input refused (P1, P2, P4).

A local HTTP server receives the webhook and verifies its Standard Webhooks signature with
the standardwebhooks library's own verifier; ntfy- and JSON-style receivers stand in for chat
channels, addressed by Apprise's own URL schemes pointed at 127.0.0.1; a real SMTP server
(aiosmtpd) receives the email. Each is started and stopped by the test; nothing of the
sender is mocked.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer, RequestKind
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import request_answer
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import policy, services, tasks
from aimon_admin.notifications.choices import (
    AttemptOutcome,
    ChannelKind,
    DeliveryStatus,
    NotificationEvent,
)
from aimon_admin.notifications.models import Channel, Delivery, DeliveryAttempt
from tests.notifications.conftest import BASE_URL, later
from tests.notifications.receivers import http_receiver, smtp_server
from tests.ports import free_port

pytestmark = pytest.mark.django_db

OPS = Actor.system("pytest")


def webhook(url: str, events: list[str] | None = None) -> tuple[Channel, str]:
    return services.webhook_create(name="ops hook", url=url, events=events, actor=OPS)


def link(request: ApprovalRequest) -> str:
    return f"{BASE_URL}/approvals/requests/{request.pk}/"


def attempts(channel: Channel) -> list[tuple[str, str]]:
    return list(
        DeliveryAttempt.objects.filter(delivery__channel=channel)
        .order_by("id")
        .values_list("outcome", "detail")
    )


# --- Real parts -----------------------------------------------------------------------------------


def test_a_webhook_receives_the_request_signed_as_standard_webhooks_says(
    open_request: Callable[..., ApprovalRequest],
) -> None:
    # P1, P4: the receiver verifies the signature with the standard library's verifier.
    with http_receiver() as receiver:
        hook, secret = webhook(receiver.url())
        request = open_request(
            skills=["deploy", "notify"], session_id="s-1", principal="alice", reason="ship it"
        )
        (got,) = receiver.wait(1)
    payload = Webhook(secret).verify(got.body, got.headers)
    assert payload["type"] == "approval.requested"
    assert payload["data"]["request"] | {} == {
        "id": str(request.pk),
        "kind": "SKILL",
        "runtime": "agent-one",
        "session_id": "s-1",
        "principal": "alice",
        "skills": ["deploy", "notify"],
        "subject": None,
        "reason": "ship it",
        "expires_at": request.expires_at.astimezone(dt.UTC).isoformat(),
        "status": "PENDING",
        "url": link(request),
    }
    (delivery,) = Delivery.objects.filter(channel=hook)
    assert got.headers["webhook-id"] == f"msg_{delivery.key.hex}"
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.SENT, 1)
    assert attempts(hook) == [(AttemptOutcome.SENT, "answered 200")]
    # Another secret does not verify it: the signature is the endpoint's own.
    with pytest.raises(WebhookVerificationError):
        Webhook(services.new_webhook_secret()).verify(got.body, got.headers)


def test_a_rotated_secret_signs_from_the_next_message_on(
    open_request: Callable[..., ApprovalRequest],
) -> None:
    # P4: rotatable; the old secret stops at once.
    with http_receiver() as receiver:
        hook, old = webhook(receiver.url())
        hook, new = services.webhook_rotate(channel=hook, actor=OPS)
        open_request(session_id="s-1", principal="alice")
        (got,) = receiver.wait(1)
    Webhook(new).verify(got.body, got.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(got.body, got.headers)


def test_an_ntfy_channel_gets_the_message_and_opens_the_request(
    open_request: Callable[..., ApprovalRequest], person: User
) -> None:
    # P1: a phone push through Apprise's ntfy URL; tapping it opens the request's page.
    with http_receiver() as receiver:
        channel = services.channel_add(
            owner=person,
            kind=ChannelKind.APPRISE,
            name="phone",
            target=f"ntfy://{receiver.base}/aimon",
            actor=OPS,
        )
        request = open_request(session_id="s-1", principal="alice", reason="ship it")
        (got,) = receiver.wait(1)
    body = json.loads(got.body)
    assert body["topic"] == "aimon"
    assert body["title"] == "agent-one asks for deploy"
    assert f"Open: {link(request)}" in body["message"]
    assert "Reason: ship it" in body["message"]
    assert got.headers["x-click"] == link(request)
    assert got.headers["x-actions"] == f"view, Open, {link(request)}"
    assert channel.shown_target == f"ntfy://{receiver.base}/aimon"
    assert attempts(channel) == [(AttemptOutcome.SENT, "accepted")]


def test_a_json_channel_gets_title_and_message(
    open_request: Callable[..., ApprovalRequest], person: User
) -> None:
    # P1: any Apprise URL; json:// stands for the chat tools' webhooks.
    with http_receiver() as receiver:
        services.channel_add(
            owner=person,
            kind=ChannelKind.APPRISE,
            name="chat",
            target=f"json://{receiver.base}/chat",
            actor=OPS,
        )
        request = open_request(session_id=None, principal="alice")
        (got,) = receiver.wait(1)
    body = json.loads(got.body)
    assert got.path == "/chat"
    assert body["title"] == "agent-one asks for deploy"
    assert f"Session: {policy.NO_SESSION}" in body["message"]
    assert link(request) in body["message"]


def test_an_email_arrives_at_a_real_smtp_server(
    open_request: Callable[..., ApprovalRequest], person: User, settings: Any
) -> None:
    # P1: email through Django's email framework and SMTP; plain text and a compact HTML part.
    with smtp_server() as smtp:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = smtp.host, smtp.port
        settings.DEFAULT_FROM_EMAIL = "aimon@example.test"
        services.channel_add(
            owner=person, kind=ChannelKind.EMAIL, name="work", target="alice@example.test", actor=OPS
        )
        request = open_request(session_id="s-1", principal="alice")
        assert smtp.mailbox.arrived.wait(10)
    (message,) = smtp.mailbox.messages
    assert smtp.mailbox.envelopes == [("aimon@example.test", ["alice@example.test"])]
    assert message["Subject"] == "agent-one asks for deploy"
    text = message.get_body(("plain",)).get_content()
    html = message.get_body(("html",)).get_content()
    assert f"Open: {link(request)}" in text
    assert f'href="{link(request)}"' in html


def test_a_tool_request_says_its_tool_and_never_a_secret_argument_or_token(
    open_request: Callable[..., ApprovalRequest], person: User, runtime_token: str
) -> None:
    # P1: never a token, never a secret, never the arguments beyond the subject.
    with http_receiver() as receiver:
        _hook, secret = webhook(receiver.url())
        services.channel_add(
            owner=person,
            kind=ChannelKind.APPRISE,
            name="chat",
            target=f"json://{receiver.base}/chat",
            actor=OPS,
        )
        open_request(
            kind=RequestKind.TOOL,
            skills=[],
            tool="Bash",
            session_id="s-1",
            principal="alice",
            arguments={"command": "deploy", "password": "hunter2-do-not-send"},
        )
        got = receiver.wait(2)
    assert len(got) == 2
    for item in got:
        text = item.body.decode() + json.dumps(item.headers)
        for secret_value in ("hunter2-do-not-send", secret, runtime_token, '"arguments"'):
            assert secret_value not in text
    tool_message = json.loads(next(g for g in got if g.path == "/chat").body)
    assert tool_message["title"] == "agent-one asks to run Bash"


def test_the_answer_is_sent_to_webhooks_that_take_it(
    open_request: Callable[..., ApprovalRequest], person: User, django_capture_on_commit_callbacks: Any
) -> None:
    # The webhook events (README.md, Notifications): approval.answered.
    with http_receiver() as receiver:
        _hook, secret = webhook(receiver.url())
        request = open_request(session_id="s-1", principal="alice")
        with django_capture_on_commit_callbacks(execute=True):
            request_answer(request=request, user=person, answer=Answer.ALLOW_SESSION)
        got = receiver.wait(2)
    types = [Webhook(secret).verify(g.body, g.headers)["type"] for g in got]
    assert types == ["approval.requested", "approval.answered"]
    answered = json.loads(got[1].body)["data"]["request"]
    assert (answered["status"], answered["answered_by"]) == ("ANSWERED", "alice")
    assert answered["decisions"] == [{"name": "deploy", "decision": "ALLOW"}]


def test_only_the_people_who_answer_are_told(
    open_request: Callable[..., ApprovalRequest], person: User, other_approver: User, operator: User
) -> None:
    # P1, S13: Alice's request goes to Alice; a request with no principal to the operators.
    with http_receiver() as receiver:
        for user in (person, other_approver, operator):
            services.channel_add(
                owner=user,
                kind=ChannelKind.APPRISE,
                name="chat",
                target=f"json://{receiver.base}/{user.username}",
                actor=OPS,
            )
        open_request(session_id="s-1", principal="alice")
        open_request(session_id=None, principal=None)
        got = receiver.wait(2)
    assert sorted(g.path for g in got) == ["/alice", "/olivia"]


# --- Exactly once, nothing lost -------------------------------------------------------------------


def test_a_fan_out_or_a_send_run_twice_sends_once(open_request: Callable[..., ApprovalRequest]) -> None:
    # P2: idempotent; a retried task sends once.
    with http_receiver() as receiver:
        hook, _ = webhook(receiver.url())
        request = open_request(session_id="s-1", principal="alice")
        receiver.wait(1)
        assert tasks.fan_out.apply(args=[str(request.pk), NotificationEvent.REQUESTED]).get() == 0
        (delivery,) = Delivery.objects.filter(channel=hook)
        assert tasks.deliver.apply(args=[delivery.pk]).get() is None
        with later(60):
            assert tasks.sweep.apply().get() == {
                "escalated": 0,
                "waiting": 0,
                "owed": 0,
                "due": 0,
                "digests": 0,
                "reclaimed": 0,
            }
    assert len(receiver.got) == 1


def test_a_request_whose_fan_out_never_ran_is_found_by_the_sweep(runtime: Any) -> None:
    # P2: the queue was down when the request opened: nothing is lost, the sweep sends it.
    from aimon_admin.approvals.services import RequestInput, request_create

    with http_receiver() as receiver:
        webhook(receiver.url())
        request, _ = request_create(RequestInput(runtime=runtime, skills=["deploy"], session_id="s-1"))
        assert Delivery.objects.count() == 0  # its after-commit work never ran
        assert tasks.sweep.apply().get()["owed"] == 0  # its hint may still come
        with later(60):
            assert tasks.sweep.apply().get()["owed"] == 1
        (got,) = receiver.wait(1)
    assert json.loads(got.body)["data"]["request"]["id"] == str(request.pk)


def test_a_send_whose_worker_died_is_handed_back_and_sent_under_the_same_webhook_id(
    open_request: Callable[..., ApprovalRequest],
) -> None:
    # P2: a claimed row whose lease lapsed goes back to the queue. P4: at least once, the
    # same message id on every try (a receiver dedupes by it).
    with http_receiver(answer=500) as receiver:
        hook, _ = webhook(receiver.url())
        open_request(session_id="s-1", principal="alice")
        receiver.wait(1)
        receiver.answer = 200
        (delivery,) = Delivery.objects.filter(channel=hook)
        Delivery.objects.filter(pk=delivery.pk).update(
            status=DeliveryStatus.SENDING, lease_until=timezone.now() - dt.timedelta(seconds=1)
        )
        assert services.deliveries_sweep().reclaimed == 1
        Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
        assert tasks.sweep.apply().get()["due"] == 1
        first, again = receiver.wait(2)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.SENT, 2)
    assert first.headers["webhook-id"] == again.headers["webhook-id"] == f"msg_{delivery.key.hex}"


# --- Bad input at send: each a clear message, nothing blocked -----------------------------------------


def _one_attempt(open_request: Callable[..., ApprovalRequest], url: str) -> tuple[Delivery, str]:
    hook, _ = webhook(url)
    request = open_request(session_id="s-1", principal="alice")
    assert ApprovalRequest.objects.filter(
        pk=request.pk
    ).exists()  # the request stands, whatever the channel did
    (delivery,) = Delivery.objects.filter(channel=hook)
    (attempt,) = DeliveryAttempt.objects.filter(delivery=delivery)
    return delivery, attempt.detail


def test_a_receiver_answering_500_is_retried_later(open_request: Callable[..., ApprovalRequest]) -> None:
    with http_receiver(answer=500) as receiver:
        delivery, detail = _one_attempt(open_request, receiver.url())
    assert detail == "The receiver answered 500: receiver says no."
    assert delivery.status == DeliveryStatus.PENDING
    assert delivery.next_attempt_at > timezone.now() + dt.timedelta(seconds=5)


def test_a_receiver_that_hangs_is_cut_off_at_the_time_limit(
    open_request: Callable[..., ApprovalRequest],
) -> None:
    with http_receiver(hang=True) as receiver:
        delivery, detail = _one_attempt(open_request, receiver.url())
    assert detail == "The receiver did not answer within 2 seconds."
    assert delivery.status == DeliveryStatus.PENDING


def test_a_redirect_to_another_host_is_not_followed(open_request: Callable[..., ApprovalRequest]) -> None:
    with http_receiver() as elsewhere, http_receiver(answer=302) as receiver:
        receiver.location = elsewhere.url("/stolen")
        _delivery, detail = _one_attempt(open_request, receiver.url())
    assert (
        detail
        == f"The receiver answered 302, a redirect to {elsewhere.url('/stolen')}; redirects are not followed."
    )
    assert elsewhere.got == []


def test_an_apprise_redirect_is_not_followed_either(
    open_request: Callable[..., ApprovalRequest], person: User
) -> None:
    with http_receiver() as elsewhere, http_receiver(answer=307) as receiver:
        receiver.location = elsewhere.url("/stolen")
        channel = services.channel_add(
            owner=person,
            kind=ChannelKind.APPRISE,
            name="chat",
            target=f"json://{receiver.base}/chat?redirect=yes",
            actor=OPS,
        )
        open_request(session_id="s-1", principal="alice")
    assert elsewhere.got == []
    ((outcome, detail),) = attempts(channel)
    assert outcome == AttemptOutcome.FAILED
    assert detail.startswith("The channel refused the message:")


def test_an_unreachable_host_is_a_failed_attempt(open_request: Callable[..., ApprovalRequest]) -> None:
    _delivery, detail = _one_attempt(open_request, f"http://127.0.0.1:{free_port()}/hook")
    assert detail.startswith("Could not connect to 127.0.0.1: ")
    assert "refused" in detail


def test_a_private_address_is_refused_again_at_send(
    open_request: Callable[..., ApprovalRequest], settings: Any
) -> None:
    # SSRF: allowed when saved, forbidden since: refused at send, never tried again.
    with http_receiver() as receiver:
        hook, _ = webhook(receiver.url())
        settings.AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES = False
        open_request(session_id="s-1", principal="alice")
    assert receiver.got == []
    (delivery,) = Delivery.objects.filter(channel=hook)
    assert delivery.status == DeliveryStatus.FAILED
    assert attempts(hook) == [
        (
            AttemptOutcome.REFUSED,
            policy.PRIVATE_ADDRESS_MESSAGE.format(host="127.0.0.1", address="127.0.0.1"),
        )
    ]
    (event,) = AuditEvent.objects.filter(action=AuditAction.NOTIFICATION_GAVE_UP)
    assert event.details["delivery_id"] == delivery.pk


def test_a_channel_failing_n_times_in_a_row_is_broken_and_a_test_mends_it(
    open_request: Callable[..., ApprovalRequest], person: User, django_capture_on_commit_callbacks: Any
) -> None:
    # P2: broken after AIMON_NOTIFY_BROKEN_AFTER (3 here) failures in a row; its owner is told
    # on their page; a successful test brings it back. Each audited.
    with http_receiver(answer=500) as receiver:
        channel = services.channel_add(
            owner=person, kind=ChannelKind.APPRISE, name="chat", target=f"json://{receiver.base}/c", actor=OPS
        )
        for n in range(3):
            open_request(session_id=f"s-{n}", principal="alice")
        channel.refresh_from_db()
        assert channel.broken_at is not None
        assert channel.consecutive_failures == 3
        assert set(Delivery.objects.filter(channel=channel).values_list("status", flat=True)) == {
            DeliveryStatus.FAILED
        }
        open_request(session_id="s-later", principal="alice")
        assert len(receiver.got) == 3  # nothing more is sent to a broken channel
        assert AuditEvent.objects.filter(action=AuditAction.NOTIFICATION_CHANNEL_BROKEN).count() == 1
        receiver.answer = 200
        with django_capture_on_commit_callbacks(execute=True):
            test = services.channel_test(channel=channel, actor=OPS)
    test.refresh_from_db()
    channel.refresh_from_db()
    assert test.status == DeliveryStatus.SENT
    assert (channel.broken_at, channel.consecutive_failures) == (None, 0)
    assert AuditEvent.objects.filter(action=AuditAction.NOTIFICATION_CHANNEL_MENDED).count() == 1


def test_a_webhook_test_message_is_signed_too(django_capture_on_commit_callbacks: Any) -> None:
    with http_receiver() as receiver:
        hook, secret = webhook(receiver.url())
        with django_capture_on_commit_callbacks(execute=True):
            services.channel_test(channel=hook, actor=OPS)
        (got,) = receiver.wait(1)
    payload = Webhook(secret).verify(got.body, got.headers)
    assert payload["type"] == "approval.test"


# --- Digest and quiet hours -------------------------------------------------------------------------


def test_a_digest_sends_the_requests_still_waiting_in_one_message(
    open_request: Callable[..., ApprovalRequest], person: User, django_capture_on_commit_callbacks: Any
) -> None:
    # A digest: one message every N minutes naming each request still waiting.
    services.preference_set(
        user=person, digest_minutes=15, quiet_start=None, quiet_end=None, timezone_name="UTC", actor=OPS
    )
    with http_receiver() as receiver:
        channel = services.channel_add(
            owner=person, kind=ChannelKind.APPRISE, name="chat", target=f"json://{receiver.base}/c", actor=OPS
        )
        first = open_request(session_id="s-1", principal="alice")
        second = open_request(session_id="s-2", principal="alice")
        answered = open_request(session_id="s-3", principal="alice")
        with django_capture_on_commit_callbacks(execute=True):
            request_answer(request=answered, user=person, answer=Answer.DENY)
        held = Delivery.objects.filter(channel=channel)
        assert set(held.values_list("status", flat=True)) == {DeliveryStatus.HELD}
        assert len(set(held.values_list("next_attempt_at", flat=True))) == 1  # one digest
        assert receiver.got == []
        assert tasks.sweep.apply().get()["digests"] == 0  # not due yet
        held.update(next_attempt_at=timezone.now())
        assert tasks.sweep.apply().get()["digests"] == 1
        (got,) = receiver.wait(1)
    body = json.loads(got.body)
    assert body["title"] == "2 requests wait for you"
    assert link(first) in body["message"]
    assert link(second) in body["message"]
    assert link(answered) not in body["message"]
    statuses = dict(Delivery.objects.filter(channel=channel).values_list("request_id", "status"))
    assert statuses == {
        first.pk: DeliveryStatus.SENT,
        second.pk: DeliveryStatus.SENT,
        answered.pk: DeliveryStatus.SKIPPED,
    }


def test_quiet_hours_hold_a_message_until_they_end(
    open_request: Callable[..., ApprovalRequest], person: User
) -> None:
    # During quiet hours nothing but escalations reaches them.
    now = timezone.now()
    start = (now - dt.timedelta(hours=1)).time().replace(second=0, microsecond=0)
    end = (now + dt.timedelta(hours=1)).time().replace(second=0, microsecond=0)
    services.preference_set(
        user=person, digest_minutes=0, quiet_start=start, quiet_end=end, timezone_name="UTC", actor=OPS
    )
    with http_receiver() as receiver:
        channel = services.channel_add(
            owner=person, kind=ChannelKind.APPRISE, name="chat", target=f"json://{receiver.base}/c", actor=OPS
        )
        _hook, _ = webhook(receiver.url("/org"))
        open_request(session_id="s-1", principal="alice")
        got = receiver.wait(1)
    assert [g.path for g in got] == ["/org"]  # the organisation's webhook is not the person's quiet
    (delivery,) = Delivery.objects.filter(channel=channel)
    assert delivery.status == DeliveryStatus.HELD
    assert delivery.next_attempt_at > now + dt.timedelta(minutes=50)
