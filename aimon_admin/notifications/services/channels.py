"""Channel writes (P1, P4): a person's email and chat/phone channels, their digest and quiet
hours, operators' signed webhooks and their secrets. Each is audited in its transaction (A3);
no event ever holds a webhook secret or the token inside an Apprise URL."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import secrets
import zoneinfo
from typing import Any

from django.db import transaction
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import senders
from aimon_admin.notifications.choices import APPROVAL_EVENTS, WEBHOOK_EVENTS, ChannelKind, DeliveryStatus
from aimon_admin.notifications.models import (
    CHANNEL_NAME_MAX,
    CHANNEL_TARGET_MAX,
    DIGEST_MINUTES_MAX,
    Channel,
    Delivery,
    Preference,
)
from aimon_admin.notifications.services.errors import (
    CHANNEL_KIND_MESSAGE,
    DIGEST_MESSAGE,
    EVENTS_MESSAGE,
    NAME_MESSAGE,
    NOT_A_WEBHOOK_MESSAGE,
    QUIET_MESSAGE,
    REMOVED_MESSAGE,
    SIGNING_KEY_MESSAGE,
    TARGET_LENGTH_MESSAGE,
    TIMEZONE_MESSAGE,
    ChannelError,
)

SUBJECT_TYPE = "notification_channel"
SECRET_BYTES = 24
# A secret someone gives (load_config): Standard Webhooks asks for 24 to 64 random bytes.
SECRET_BYTES_RANGE = (24, 64)
SECRET_PREFIX = "whsec_"  # noqa: S105 # nosec B105 - the prefix, not a secret


def _name(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > CHANNEL_NAME_MAX or any(ord(c) < 32 for c in name):
        raise ChannelError(NAME_MESSAGE.format(limit=CHANNEL_NAME_MAX), field="name")
    return name


def _target(target: str, field: str) -> str:
    target = (target or "").strip()
    if len(target) > CHANNEL_TARGET_MAX:
        raise ChannelError(TARGET_LENGTH_MESSAGE.format(limit=CHANNEL_TARGET_MAX), field=field)
    if "\x00" in target:
        raise ChannelError(
            senders.URL_UNREADABLE_MESSAGE.format(problem="it holds a NUL character"), field=field
        )
    return target


def _checked(kind: str, target: str) -> str:
    """The target checked as its kind's sender would check it; returns what pages show."""
    field = "address" if kind == ChannelKind.EMAIL else "url"
    target = _target(target, field)
    try:
        if kind == ChannelKind.EMAIL:
            senders.email_check(target)
            return target
        if kind == ChannelKind.APPRISE:
            senders.apprise_plugin(target)
            return senders.apprise_shown(target)
        senders.webhook_url_check(target)
        return senders.webhook_shown(target)
    except senders.SendError as exc:
        raise ChannelError(exc.message, field=field) from exc


def _described(channel: Channel) -> dict[str, Any]:
    """A channel as an audit event names it: its shown (masked) address, never its secret."""
    return {
        "channel_id": channel.pk,
        "kind": channel.kind,
        "name": channel.name,
        "address": channel.shown_target,
        **({"owner": channel.owner.username} if channel.owner_id else {}),
        **({"events": list(channel.events)} if channel.is_webhook else {}),
    }


@transaction.atomic
def channel_add(*, owner: User, kind: ChannelKind | str, name: str, target: str, actor: Actor) -> Channel:
    """A person adds an email address or a chat/phone URL (checked: an address this server may
    send to, a URL the library understands)."""
    if kind not in (ChannelKind.EMAIL, ChannelKind.APPRISE):
        raise ChannelError(CHANNEL_KIND_MESSAGE, field="kind")
    name = _name(name)
    shown = _checked(kind, target)
    channel = Channel.objects.create(
        owner=owner,
        kind=kind,
        name=name,
        target=target.strip(),
        shown_target=shown,
        created_by=actor.user,
    )
    audit_record(
        action=AuditAction.NOTIFICATION_CHANNEL_ADDED,
        actor=actor,
        subject_type=SUBJECT_TYPE,
        subject=channel.name,
        details=_described(channel),
    )
    return channel


def new_webhook_secret() -> str:
    """A Standard Webhooks secret: whsec_ and 24 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def webhook_secret_problem(secret: str) -> str | None:
    """Why `secret` is not a Standard Webhooks secret (whsec_ and 24-64 bytes in base64), or
    None. The message never repeats the secret."""
    low, high = SECRET_BYTES_RANGE
    message = SIGNING_KEY_MESSAGE.format(low=low, high=high)
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        return message
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        return message
    return None if low <= len(key) <= high else message


def _events(events: list[str] | None) -> list[str]:
    chosen = list(APPROVAL_EVENTS) if events is None else [e for e in WEBHOOK_EVENTS if e in set(events)]
    if not chosen or (events is not None and set(events) - set(WEBHOOK_EVENTS)):
        raise ChannelError(EVENTS_MESSAGE, field="events")
    return [str(e) for e in chosen]


@transaction.atomic
def webhook_create(
    *, name: str, url: str, actor: Actor, events: list[str] | None = None, secret: str | None = None
) -> tuple[Channel, str]:
    """An operator adds an organisation-wide signed webhook; returns it and its secret, which
    is never shown again (P4). `secret`: one the receiver already has (load_config), checked;
    without it one is made."""
    name = _name(name)
    if secret is not None and (problem := webhook_secret_problem(secret)):
        raise ChannelError(problem, field="secret")
    shown = _checked(ChannelKind.WEBHOOK, url)
    secret = secret if secret is not None else new_webhook_secret()
    channel = Channel.objects.create(
        kind=ChannelKind.WEBHOOK,
        name=name,
        target=url.strip(),
        shown_target=shown,
        secret=secret,
        events=_events(events),
        created_by=actor.user,
    )
    audit_record(
        action=AuditAction.NOTIFICATION_CHANNEL_ADDED,
        actor=actor,
        subject_type=SUBJECT_TYPE,
        subject=channel.name,
        details=_described(channel),
    )
    return channel, secret


@transaction.atomic
def webhook_rotate(*, channel: Channel, actor: Actor) -> tuple[Channel, str]:
    """A new secret for a webhook, from its next message on; the old one stops at once."""
    channel = Channel.objects.select_for_update().get(pk=channel.pk)
    if not channel.is_webhook:
        raise ChannelError(NOT_A_WEBHOOK_MESSAGE)
    if channel.removed_at is not None:
        raise ChannelError(REMOVED_MESSAGE)
    secret = new_webhook_secret()
    channel.secret = secret
    channel.secret_rotated_at = timezone.now()
    channel.save(update_fields=["secret", "secret_rotated_at"])
    audit_record(
        action=AuditAction.WEBHOOK_SECRET_ROTATED,
        actor=actor,
        subject_type=SUBJECT_TYPE,
        subject=channel.name,
        details=_described(channel),
    )
    return channel, secret


@transaction.atomic
def channel_remove(*, channel: Channel, actor: Actor) -> Channel:
    """Remove a channel: nothing more goes there; what waited for it is not sent. Its row and
    its deliveries stay for the log."""
    now = timezone.now()
    removed = Channel.objects.filter(pk=channel.pk, removed_at__isnull=True).update(removed_at=now)
    channel.refresh_from_db()
    if removed != 1:
        raise ChannelError(REMOVED_MESSAGE)
    skipped = Delivery.objects.filter(
        channel=channel, status__in=[DeliveryStatus.PENDING, DeliveryStatus.HELD]
    ).update(status=DeliveryStatus.SKIPPED, last_error="The channel was removed.", claim=None)
    audit_record(
        action=AuditAction.NOTIFICATION_CHANNEL_REMOVED,
        actor=actor,
        subject_type=SUBJECT_TYPE,
        subject=channel.name,
        details={**_described(channel), "unsent": skipped},
    )
    return channel


def _preference_values(pref: Preference) -> dict[str, Any]:
    return {
        "digest_minutes": pref.digest_minutes,
        "quiet_start": pref.quiet_start.strftime("%H:%M") if pref.quiet_start else None,
        "quiet_end": pref.quiet_end.strftime("%H:%M") if pref.quiet_end else None,
        "timezone": pref.timezone,
    }


@transaction.atomic
def preference_set(
    *,
    user: User,
    digest_minutes: int,
    quiet_start: dt.time | None,
    quiet_end: dt.time | None,
    timezone_name: str,
    actor: Actor,
) -> Preference:
    """A person's digest (every N minutes, 0 for one message per request) and quiet hours."""
    if not 0 <= digest_minutes <= DIGEST_MINUTES_MAX:
        raise ChannelError(DIGEST_MESSAGE.format(limit=DIGEST_MINUTES_MAX), field="digest_minutes")
    if (quiet_start is None) != (quiet_end is None):
        raise ChannelError(QUIET_MESSAGE, field="quiet_end" if quiet_end is None else "quiet_start")
    timezone_name = (timezone_name or "UTC").strip()
    try:
        zoneinfo.ZoneInfo(timezone_name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ChannelError(TIMEZONE_MESSAGE.format(name=timezone_name[:80]), field="timezone") from exc
    pref, _ = Preference.objects.select_for_update().get_or_create(user=user)
    before = _preference_values(pref)
    pref.digest_minutes = digest_minutes
    pref.quiet_start, pref.quiet_end = quiet_start, quiet_end
    pref.timezone = timezone_name
    after = _preference_values(pref)
    if before == after:
        return pref
    pref.save()
    audit_record(
        action=AuditAction.NOTIFICATION_PREFERENCES_CHANGED,
        actor=actor,
        subject_type="user",
        subject=user.username,
        details={"before": before, "after": after},
    )
    return pref
