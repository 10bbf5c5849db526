"""Channels people and operators chose, and every delivery to them (P1, P2, P4).

A delivery is one message about one request's event (or one signed audit checkpoint, A4) to
one channel: its row is made once (unique per request or checkpoint, channel and event), so
however often the work that makes or sends it runs, the message goes out once. Each try is
an attempt row: the delivery log.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from aimon_admin.core.encryption import EncryptedTextField
from aimon_admin.notifications.choices import (
    AttemptOutcome,
    ChannelKind,
    DeliveryStatus,
    NotificationEvent,
)

CHANNEL_NAME_MAX = 100
CHANNEL_TARGET_MAX = 2000
ERROR_MAX = 500
DIGEST_MINUTES_MAX = 24 * 60


def _in(field: str, choices: type[models.TextChoices], name: str, label: str) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=Q(**{f"{field}__in": choices.values}),
        name=name,
        violation_error_message=f"Unknown {label}.",
    )


class ChannelQuerySet(models.QuerySet):
    def live(self) -> ChannelQuerySet:
        """Channels not removed (a broken one is live: its owner mends it or removes it)."""
        return self.filter(removed_at__isnull=True)


class Channel(models.Model):
    """Where messages go: a person's email address or chat/phone URL (`owner` set), or an
    operator's organisation-wide signed webhook (no owner, a `whsec_` secret).

    `target` is the address, URL or endpoint. An Apprise URL often holds a token and a
    webhook's secret signs every body: neither is shown again once saved (pages show a
    masked form, `shown_target`), and both are encrypted in the database. A removed channel
    keeps its row for the delivery log."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="notification_channels",
    )
    kind = models.CharField(max_length=8, choices=ChannelKind.choices)
    name = models.CharField(max_length=CHANNEL_NAME_MAX)
    # Encrypted at rest (core.encryption): the address, and a webhook's signing secret.
    target = EncryptedTextField()
    shown_target = models.CharField(max_length=CHANNEL_TARGET_MAX, blank=True, default="")
    secret = EncryptedTextField(blank=True, default="")
    # A webhook's event types (NotificationEvent values); people's channels get what they may answer.
    events = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    secret_rotated_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    broken_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=ERROR_MAX, blank=True, default="")
    removed_at = models.DateTimeField(null=True, blank=True)

    objects = ChannelQuerySet.as_manager()

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            _in("kind", ChannelKind, "channel_kind_valid", "channel kind"),
            models.CheckConstraint(
                condition=(Q(kind=ChannelKind.WEBHOOK, owner__isnull=True) & ~Q(secret=""))  # nosec B106
                | (~Q(kind=ChannelKind.WEBHOOK) & Q(owner__isnull=False, secret="")),  # nosec B106
                name="channel_webhook_is_organisation_wide",
                violation_error_message=(
                    "A signed webhook belongs to the organisation and has a secret; an email or "
                    "chat channel belongs to a person and has none."
                ),
            ),
            models.CheckConstraint(
                condition=~Q(name=""),
                name="channel_name_given",
                violation_error_message="A channel has a name.",
            ),
        ]
        indexes = [models.Index(fields=["owner", "removed_at"], name="channel_owner_live")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.name}"

    @property
    def is_webhook(self) -> bool:
        return self.kind == ChannelKind.WEBHOOK


class Preference(models.Model):
    """How a person wants to be told: one message per request, or a digest every N minutes;
    and quiet hours (in their time zone) during which only escalations reach them."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="notification_preference"
    )
    digest_minutes = models.PositiveIntegerField(default=0)
    quiet_start = models.TimeField(null=True, blank=True)
    quiet_end = models.TimeField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(digest_minutes__lte=DIGEST_MINUTES_MAX),
                name="preference_digest_at_most_a_day",
                violation_error_message="A digest comes at least once a day.",
            ),
            models.CheckConstraint(
                condition=Q(quiet_start__isnull=True, quiet_end__isnull=True)
                | Q(quiet_start__isnull=False, quiet_end__isnull=False),
                name="preference_quiet_hours_whole",
                violation_error_message="Quiet hours have a start and an end.",
            ),
        ]

    def __str__(self) -> str:
        return f"notification preference of {self.user_id}"


def _about_one_subject(name: str, message: str) -> models.CheckConstraint:
    """A request's event is about a request, a checkpoint's (A4) about a signed audit
    checkpoint, a test message about nothing."""
    return models.CheckConstraint(
        condition=(
            Q(request__isnull=False, checkpoint__isnull=True)
            & ~Q(event__in=[NotificationEvent.TEST, NotificationEvent.CHECKPOINT])
        )
        | Q(request__isnull=True, checkpoint__isnull=False, event=NotificationEvent.CHECKPOINT)
        | Q(request__isnull=True, checkpoint__isnull=True, event=NotificationEvent.TEST),
        name=name,
        violation_error_message=message,
    )


class Fanout(models.Model):
    """What a request's event owes its channels (the outbox), written in approvals' own
    transaction (core.hooks, an in-transaction listener), so it exists exactly when that
    change committed, whatever Redis or a worker did after: REQUESTED and ANSWERED by the
    opening (ANSWERED due once the request has closed), ESCALATED by the escalation. A
    signed audit checkpoint (A4) owes CHECKPOINT the same way, written in the signing's
    transaction when a webhook takes checkpoints. Turned into deliveries once
    (`fanned_out_at`).

    `lease_until`: a fan-out task the sweep queued is on its way to it until then; past it,
    with the row still owed, the sweep queues another."""

    request = models.ForeignKey(
        "approvals.ApprovalRequest", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    checkpoint = models.ForeignKey(
        "audit.AuditCheckpoint", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    event = models.CharField(max_length=12, choices=NotificationEvent.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    fanned_out_at = models.DateTimeField(null=True, blank=True)
    deliveries = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            _in("event", NotificationEvent, "fanout_event_valid", "event"),
            models.UniqueConstraint(
                fields=["request", "event"],
                name="fanout_once_per_request_event",
                violation_error_message="This request's event was already fanned out.",
            ),
            models.UniqueConstraint(
                fields=["checkpoint", "event"],
                condition=Q(checkpoint__isnull=False),
                name="fanout_once_per_checkpoint",
                violation_error_message="This checkpoint was already fanned out.",
            ),
            _about_one_subject(
                "fanout_about_one_subject", "A fan-out is about a request, or a checkpoint (its own event)."
            ),
        ]
        # The sweep reads the rows still owed (few: about one per request still open).
        indexes = [models.Index(fields=["id"], condition=Q(fanned_out_at__isnull=True), name="fanout_owed")]

    def __str__(self) -> str:
        if self.checkpoint_id is not None:
            return f"{self.event} of checkpoint {self.checkpoint_id}"
        return f"{self.event} of request {self.request_id}"

    @property
    def subject_id(self) -> str:
        """What its fan-out task is given: the checkpoint's id or the request's."""
        return str(self.checkpoint_id if self.checkpoint_id is not None else self.request_id)


class Delivery(models.Model):
    """One message about one request's event to one channel (a test message has no request; a
    signed audit checkpoint's, A4, names its checkpoint instead).

    `key` is the message's id (Standard Webhooks' webhook-id): the same on every try, so a
    receiver that got it twice can tell. `next_attempt_at` is when it is due: now, after a
    back-off, or (HELD) when its digest or the owner's quiet hours end."""

    key = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    request = models.ForeignKey(
        "approvals.ApprovalRequest", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    checkpoint = models.ForeignKey(
        "audit.AuditCheckpoint", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    channel = models.ForeignKey(Channel, on_delete=models.PROTECT, related_name="deliveries")
    event = models.CharField(max_length=12, choices=NotificationEvent.choices)
    status = models.CharField(max_length=8, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    next_attempt_at = models.DateTimeField()
    # PENDING or HELD: a task to send it is queued until then (the sweep queues none before);
    # SENDING: the claim's lease (past it, the sender is taken to be dead and it is due again).
    lease_until = models.DateTimeField(null=True, blank=True)
    # Who is sending it now (a claim token), so a second worker never sends it too.
    claim = models.UUIDField(null=True, blank=True)
    # Held to go out in one message with the channel's others (a digest, or quiet hours).
    batched = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=ERROR_MAX, blank=True, default="")

    class Meta:
        ordering = ["-id"]
        constraints = [
            _in("event", NotificationEvent, "delivery_event_valid", "event"),
            _in("status", DeliveryStatus, "delivery_status_valid", "delivery status"),
            models.UniqueConstraint(
                fields=["request", "channel", "event"],
                condition=Q(request__isnull=False),
                name="delivery_once_per_request_channel_event",
                violation_error_message="This channel already has this request's message.",
            ),
            models.UniqueConstraint(
                fields=["checkpoint", "channel", "event"],
                condition=Q(checkpoint__isnull=False),
                name="delivery_once_per_checkpoint_channel",
                violation_error_message="This channel already has this checkpoint.",
            ),
            _about_one_subject(
                "delivery_about_one_subject",
                "A message is about a request, or a signed checkpoint (its own event), or nothing (a test).",
            ),
        ]
        indexes = [
            # The sweep: what is due, by status.
            models.Index(fields=["status", "next_attempt_at"], name="delivery_due"),
            # The delivery log, newest first, per channel and per request (keyset on id).
            models.Index(fields=["channel", "-id"], name="delivery_channel_log"),
            models.Index(fields=["request", "-id"], name="delivery_request_log"),
            models.Index(fields=["status", "-id"], name="delivery_status_log"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.pk} ({self.status})"


class DeliveryAttempt(models.Model):
    """One try at sending a delivery, and what came of it (the delivery log's lines)."""

    delivery = models.ForeignKey(Delivery, on_delete=models.PROTECT, related_name="attempt_rows")
    number = models.PositiveIntegerField()
    at = models.DateTimeField(auto_now_add=True)
    outcome = models.CharField(max_length=8, choices=AttemptOutcome.choices)
    detail = models.CharField(max_length=ERROR_MAX, blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            _in("outcome", AttemptOutcome, "attempt_outcome_valid", "attempt outcome"),
            models.UniqueConstraint(
                fields=["delivery", "number"],
                name="attempt_number_unique",
                violation_error_message="This attempt was already recorded.",
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery {self.delivery_id}: {self.outcome}"
