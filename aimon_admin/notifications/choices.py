"""What notifications can say and be (P1-P4)."""

from __future__ import annotations

from django.db import models

from aimon_admin.core import words


class ChannelKind(models.TextChoices):
    EMAIL = "EMAIL", "Email"
    # A chat or phone channel addressed by a notification library's URL (ntfy, Slack, ...).
    APPRISE = "APPRISE", "Chat or phone"
    # An organisation-wide endpoint signed as Standard Webhooks specifies (P4).
    WEBHOOK = "WEBHOOK", "Signed webhook"


class NotificationEvent(models.TextChoices):
    REQUESTED = "REQUESTED", "Request opened"
    ANSWERED = "ANSWERED", "Request answered"
    ESCALATED = "ESCALATED", "Request escalated"
    TEST = "TEST", "Test message"
    # A signed audit checkpoint (A4), sent to the webhooks that witness the audit log.
    CHECKPOINT = "CHECKPOINT", "Audit checkpoint signed"


# The wire names of the events: the `type` a webhook's body carries.
EVENT_TYPES: dict[str, str] = {
    NotificationEvent.REQUESTED: "approval.requested",
    NotificationEvent.ANSWERED: "approval.answered",
    NotificationEvent.ESCALATED: "approval.escalated",
    NotificationEvent.TEST: "approval.test",
    NotificationEvent.CHECKPOINT: "audit.checkpoint",
}
# A new webhook's events unless the operator chooses otherwise.
APPROVAL_EVENTS = (NotificationEvent.REQUESTED, NotificationEvent.ANSWERED, NotificationEvent.ESCALATED)
# What a webhook may take: the approval events, and each signed audit checkpoint (A4: a
# witness elsewhere). Only webhooks: a person's channel is never sent a checkpoint.
WEBHOOK_EVENTS = (*APPROVAL_EVENTS, NotificationEvent.CHECKPOINT)


class DeliveryStatus(models.TextChoices):
    PENDING = "PENDING", "Waiting to be sent"
    SENDING = "SENDING", "Being sent"
    # Batched: sent in one message at next_attempt_at (a digest, or the end of quiet hours).
    HELD = "HELD", "Held for a digest or quiet hours"
    SENT = "SENT", "Sent"
    FAILED = "FAILED", "Failed for good"
    SKIPPED = "SKIPPED", "Not sent"


class AttemptOutcome(models.TextChoices):
    SENT = "SENT", "Sent"
    FAILED = "FAILED", "Failed"
    REFUSED = "REFUSED", "Refused before sending"


# Plain words for the codes above on pages (core.words; `{% words code "kind" %}`).
words.register("channel", ChannelKind)
words.register("delivery", DeliveryStatus)
