"""What notifications adds to a request's timeline (core.timeline): each message about the
request, to whom, how, and whether it went out. Operators read every one (as in the
delivery log); anyone else only those to their own channels (as in My deliveries)."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.utils import timezone

from aimon_admin.core.timeline import Entry
from aimon_admin.notifications import selectors
from aimon_admin.notifications.choices import DeliveryStatus, NotificationEvent
from aimon_admin.notifications.models import Delivery

ANSWER_PERMISSION = "approvals.answer_approvalrequest"
LOG_PERMISSION = "notifications.view_delivery"

# What each message was about, as the timeline says it.
ABOUT = {
    NotificationEvent.REQUESTED: "that the request is waiting",
    NotificationEvent.ESCALATED: "that nobody had answered it yet (escalated)",
    NotificationEvent.ANSWERED: "that it was answered",
}


def _to(delivery: Delivery) -> str:
    channel = delivery.channel
    if channel.owner_id is None:
        return f"the signed webhook {channel.name}"
    return f"{channel.owner.username} by {channel.get_kind_display().lower()} ({channel.name})"


def _entry(delivery: Delivery) -> Entry:
    about = ABOUT.get(delivery.event, delivery.get_event_display().lower())
    to = _to(delivery)
    if delivery.status == DeliveryStatus.SENT and delivery.sent_at is not None:
        return Entry(delivery.sent_at, "notified", "Notified", f"Told {to} {about}.")
    if delivery.status == DeliveryStatus.HELD:
        due = timezone.localtime(delivery.next_attempt_at).strftime("%Y-%m-%d %H:%M")
        text = f"A message to {to} {about} is held for a digest or quiet hours, until {due}."
        return Entry(delivery.created_at, "notify-held", "Notification held", text)
    if delivery.status == DeliveryStatus.FAILED:
        tries = f"{delivery.attempts} tr{'y' if delivery.attempts == 1 else 'ies'}"
        text = f"A message to {to} {about} could not be sent ({tries}); the delivery log says why."
        return Entry(delivery.created_at, "notify-failed", "Notification failed", text)
    if delivery.status == DeliveryStatus.SKIPPED:
        text = f"A message to {to} {about} was not sent; the delivery log says why."
        return Entry(delivery.created_at, "notify-skipped", "Not notified", text)
    text = f"A message to {to} {about} is being sent."
    return Entry(delivery.created_at, "notify-pending", "Notifying", text)


def request_entries(request_id: str, user: AbstractBaseUser | AnonymousUser) -> Iterable[Entry]:
    """The request's deliveries as timeline entries, for someone who may answer requests."""
    if not user.has_perm(ANSWER_PERMISSION):
        return []
    mine_only = None if user.has_perm(LOG_PERMISSION) else user
    return [_entry(d) for d in selectors.deliveries_of_request(request_id=request_id, user=mine_only)]
