"""Channel writes (P1, P4; bad input refused at save): each audited in its transaction, no
event or page ever holding a webhook secret or an Apprise URL's token; a URL the library
cannot parse, an address this server may not send to, the product itself — each refused with
plain words naming the field."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import IntegrityError, transaction

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import policy, senders, services
from aimon_admin.notifications.choices import ChannelKind, DeliveryStatus, NotificationEvent
from aimon_admin.notifications.models import Channel, Delivery, Preference
from aimon_admin.notifications.services import errors

pytestmark = pytest.mark.django_db

SLACK = "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#alerts"


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("seq"))


def test_adding_a_chat_channel_keeps_its_token_out_of_pages_and_events(approver: User) -> None:
    # P1 + A1: the URL's tokens are secrets: the page shows the library's masked form.
    channel = services.channel_add(
        owner=approver,
        kind=ChannelKind.APPRISE,
        name="team chat",
        target=SLACK,
        actor=Actor.for_user(approver),
    )
    assert channel.target == SLACK
    assert channel.shown_target == "slack://T...2/A...D/T...Q/%...s/"
    (event,) = events(AuditAction.NOTIFICATION_CHANNEL_ADDED)
    assert event.actor_label == "alice"
    assert event.details == {
        "channel_id": channel.pk,
        "kind": "APPRISE",
        "name": "team chat",
        "address": "slack://T...2/A...D/T...Q/%...s/",
        "owner": "alice",
    }
    assert "TIiajkdnlazkcOXrIdevi7FQ" not in str(event.details)


def test_a_webhook_secret_is_returned_once_and_never_audited(operator: User) -> None:
    # P4: whsec_ secret, shown once; the audit log names the webhook, never the secret.
    hook, secret = services.webhook_create(
        name="siem",
        url="https://93.184.216.34/hooks/aimon?token=abc123456789",
        actor=Actor.for_user(operator),
    )
    assert secret.startswith("whsec_")
    assert hook.secret == secret
    assert hook.events == ["REQUESTED", "ANSWERED", "ESCALATED"]
    assert hook.shown_target == "https://93.184.216.34/hooks/aimon?…"
    rotated, new_secret = services.webhook_rotate(channel=hook, actor=Actor.for_user(operator))
    assert new_secret != secret
    assert rotated.secret_rotated_at is not None
    logged = [e.details for e in AuditEvent.objects.all()]
    for value in (secret, new_secret, "abc123456789"):
        assert value not in str(logged)
    assert [
        e.action for e in AuditEvent.objects.filter(subject_type="notification_channel").order_by("seq")
    ] == [
        AuditAction.NOTIFICATION_CHANNEL_ADDED,
        AuditAction.WEBHOOK_SECRET_ROTATED,
    ]


def test_removing_a_channel_stops_what_waited_and_keeps_its_log(approver: User, runtime: Any) -> None:
    from aimon_admin.approvals.services import RequestInput, request_create

    channel = services.channel_add(
        owner=approver,
        kind=ChannelKind.EMAIL,
        name="work",
        target="alice@example.test",
        actor=Actor.for_user(approver),
    )
    request, _ = request_create(RequestInput(runtime=runtime, skills=["deploy"], session_id="s-1"))
    waiting = Delivery.objects.create(
        request=request,
        channel=channel,
        event=NotificationEvent.REQUESTED,
        next_attempt_at=request.created_at,
    )
    services.channel_remove(channel=channel, actor=Actor.for_user(approver))
    waiting.refresh_from_db()
    assert waiting.status == DeliveryStatus.SKIPPED
    (event,) = events(AuditAction.NOTIFICATION_CHANNEL_REMOVED)
    assert event.details["unsent"] == 1
    with pytest.raises(errors.ChannelError, match=errors.REMOVED_MESSAGE):
        services.channel_remove(channel=channel, actor=Actor.for_user(approver))
    assert Channel.objects.filter(pk=channel.pk).exists()


def test_preferences_are_audited_with_before_and_after(approver: User) -> None:
    # Digests and quiet hours.
    actor = Actor.for_user(approver)
    services.preference_set(
        user=approver, digest_minutes=30, quiet_start=dt.time(22), quiet_end=dt.time(7),
        timezone_name="Europe/Paris", actor=actor,
    )  # fmt: skip
    services.preference_set(
        user=approver, digest_minutes=30, quiet_start=dt.time(22), quiet_end=dt.time(7),
        timezone_name="Europe/Paris", actor=actor,
    )  # fmt: skip
    (event,) = events(AuditAction.NOTIFICATION_PREFERENCES_CHANGED)  # the same again changes nothing
    assert event.details == {
        "before": {"digest_minutes": 0, "quiet_start": None, "quiet_end": None, "timezone": "UTC"},
        "after": {
            "digest_minutes": 30,
            "quiet_start": "22:00",
            "quiet_end": "07:00",
            "timezone": "Europe/Paris",
        },
    }


# --- Bad input at save ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "target", "field", "message"),
    [
        (ChannelKind.APPRISE, "bogus://nothing", "url", senders.APPRISE_UNKNOWN_MESSAGE),
        (ChannelKind.APPRISE, "not a url at all", "url", senders.APPRISE_UNKNOWN_MESSAGE),
        (
            ChannelKind.APPRISE,
            "json://host.invalid/x",
            "url",
            "host.invalid could not be found (no DNS record).",
        ),
        (ChannelKind.EMAIL, "alice-at-example", "address", senders.EMAIL_INVALID_MESSAGE),
        (
            ChannelKind.APPRISE,
            "json://169.254.169.254/latest/meta-data",
            "url",
            policy.METADATA_ADDRESS_MESSAGE.format(host="169.254.169.254", address="169.254.169.254"),
        ),
        (
            ChannelKind.APPRISE,
            "json://aimon.test/x",
            "url",
            policy.SELF_ADDRESS_MESSAGE.format(host="aimon.test"),
        ),
        (ChannelKind.APPRISE, "x" * 2001, "url", errors.TARGET_LENGTH_MESSAGE.format(limit=2000)),
        (ChannelKind.APPRISE, "syslog://", "url", senders.APPRISE_LOCAL_MESSAGE),
        (ChannelKind.WEBHOOK, "https://example.test/hook", "kind", errors.CHANNEL_KIND_MESSAGE),
    ],
)
def test_a_channel_that_cannot_be_sent_to_is_refused_at_save(
    approver: User, kind: str, target: str, field: str, message: str
) -> None:
    with pytest.raises(errors.ChannelError) as refused:
        services.channel_add(
            owner=approver, kind=kind, name="c", target=target, actor=Actor.for_user(approver)
        )
    assert (refused.value.field, refused.value.message) == (field, message)
    assert not Channel.objects.exists()
    assert not events(AuditAction.NOTIFICATION_CHANNEL_ADDED)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.test/hook", senders.URL_SCHEME_MESSAGE),
        ("https:///hook", senders.URL_HOST_MESSAGE),
        ("http://[::1/hook", "This is not an address this server can read: Invalid IPv6 URL"),
        (
            "http://127.0.0.1:8080/hook",
            policy.PRIVATE_ADDRESS_MESSAGE.format(host="127.0.0.1", address="127.0.0.1"),
        ),
        ("http://10.0.0.7/hook", policy.PRIVATE_ADDRESS_MESSAGE.format(host="10.0.0.7", address="10.0.0.7")),
        ("http://localhost:9/hook", "localhost is a private, loopback or link-local address"),
        ("http://aimon.test/api/v1/tools", policy.SELF_ADDRESS_MESSAGE.format(host="aimon.test")),
    ],
)
def test_a_webhook_to_a_private_address_or_the_product_is_refused_when_forbidden(
    operator: User, settings: Any, url: str, message: str
) -> None:
    # SSRF: with private addresses forbidden (production's default), refused at save.
    settings.AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES = False
    with pytest.raises(errors.ChannelError) as refused:
        services.webhook_create(name="hook", url=url, actor=Actor.for_user(operator))
    assert refused.value.field == "url"
    assert refused.value.message.startswith(message)
    assert not Channel.objects.exists()


@pytest.mark.parametrize(
    ("values", "field", "message"),
    [
        ({"digest_minutes": 1441}, "digest_minutes", errors.DIGEST_MESSAGE.format(limit=1440)),
        ({"quiet_start": dt.time(22)}, "quiet_end", errors.QUIET_MESSAGE),
        ({"timezone_name": "Mars/Olympus"}, "timezone", errors.TIMEZONE_MESSAGE.format(name="Mars/Olympus")),
    ],
)
def test_bad_preferences_are_refused_naming_the_field(
    approver: User, values: dict, field: str, message: str
) -> None:
    arguments = {
        "digest_minutes": 0,
        "quiet_start": None,
        "quiet_end": None,
        "timezone_name": "UTC",
        **values,
    }
    with pytest.raises(errors.ChannelError) as refused:
        services.preference_set(user=approver, actor=Actor.for_user(approver), **arguments)
    assert (refused.value.field, refused.value.message) == (field, message)
    assert not Preference.objects.exists()


# --- Constraints --------------------------------------------------------------------------------------


def test_a_webhook_is_organisation_wide_and_a_persons_channel_has_no_secret(approver: User) -> None:
    for row in (
        Channel(kind=ChannelKind.WEBHOOK, owner=approver, name="x", target="https://x", secret="whsec_x"),
        Channel(kind=ChannelKind.WEBHOOK, name="x", target="https://x", secret=""),
        Channel(kind=ChannelKind.EMAIL, owner=approver, name="x", target="a@b.c", secret="whsec_x"),
        Channel(kind=ChannelKind.EMAIL, name="x", target="a@b.c"),
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            row.save()


def test_one_delivery_per_request_channel_and_event(approver: User, runtime: Any) -> None:
    # P2: a retried fan-out cannot make a second message.
    from aimon_admin.approvals.services import RequestInput, request_create

    channel = services.channel_add(
        owner=approver,
        kind=ChannelKind.EMAIL,
        name="work",
        target="alice@example.test",
        actor=Actor.for_user(approver),
    )
    request, _ = request_create(RequestInput(runtime=runtime, skills=["deploy"], session_id="s-1"))
    fields = {"request": request, "channel": channel, "event": NotificationEvent.REQUESTED}
    Delivery.objects.create(next_attempt_at=request.created_at, **fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        Delivery.objects.create(next_attempt_at=request.created_at, **fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        Delivery.objects.create(
            channel=channel, event=NotificationEvent.REQUESTED, next_attempt_at=request.created_at
        )
