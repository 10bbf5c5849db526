"""Reads for notifications: who is told about a request, what a message may say of it,
each person's channels, and the delivery log (keyset paged)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Max, Q, QuerySet
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals.choices import RequestKind
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.selectors import request_list_visible_to
from aimon_admin.notifications.choices import ChannelKind
from aimon_admin.notifications.models import Channel, Delivery, Preference
from aimon_admin.notifications.policy import RequestFacts

ANSWERERS = (Role.APPROVER, Role.OPERATOR)
LOG_PAGE_SIZE = 50


def _may_answer(user: User) -> bool:
    return user.is_active and any(user.has_role(role) for role in ANSWERERS)


def recipients_for(*, request: ApprovalRequest) -> list[User]:
    """The people told when `request` opens (P1, S13): its principal when that is a person who
    answers requests; otherwise those who answer it in their place, the operators and the
    runtime's owner. (Operators see every request, but are told only of the ones nobody
    else can answer: escalation reaches them for the rest.)"""
    if request.principal:
        person = (
            User.objects.filter(username=request.principal, is_active=True).prefetch_related("groups").first()
        )
        if person is not None and _may_answer(person):
            return [person]
    return escalation_recipients_for(request=request)


def escalation_recipients_for(*, request: ApprovalRequest) -> list[User]:
    """The operators and the runtime's owner: told when nobody answered `request` in its
    runtime's time (P2), and when it has nobody else to answer it. Only those who may open it
    (P5, S13: `approvals.selectors.request_list_visible_to` decides): the owner is not told of
    a request whose principal is a person here, which only that person and operators see."""
    people = list(
        User.objects.filter(is_active=True, groups__name=Role.OPERATOR).prefetch_related("groups").distinct()
    )
    owner = request.runtime.owner
    if (
        owner is not None
        and owner.pk not in {p.pk for p in people}
        and _may_answer(owner)
        and request_list_visible_to(user=owner).filter(pk=request.pk).exists()
    ):
        people.append(owner)
    return people


def request_link(request_id: str) -> str:
    """The one link a message carries: the request's page (sign-in first, then it lands there)."""
    path = reverse("approvals:request", args=[request_id])
    return settings.AIMON_BASE_URL.rstrip("/") + path


def inbox_link() -> str:
    return settings.AIMON_BASE_URL.rstrip("/") + reverse("approvals:inbox")


def request_facts(*, request: ApprovalRequest) -> RequestFacts:
    """What a message says about `request`: never its arguments beyond the subject."""
    items = list(request.items.all())
    return RequestFacts(
        id=str(request.pk),
        kind=request.kind,
        runtime=request.runtime.name,
        session_id=request.session.session_id if request.session_id else None,
        invoking_session_id=request.invoking_session.session_id if request.invoking_session_id else None,
        principal=request.principal,
        skills=tuple(item.skill for item in items) if request.kind == RequestKind.SKILL else (),
        tool=request.tool,
        server=request.server,
        subject=request.subject,
        reason=request.reason,
        expires_at=request.expires_at,
        url=request_link(str(request.pk)),
        status=request.status,
        answered_by=request.answered_by.username if request.answered_by_id else "",
        decisions=tuple((item.skill, item.decision or "UNANSWERED") for item in items),
        escalated_at=request.escalated_at,
        waited_seconds=(
            int((request.escalated_at - request.created_at).total_seconds()) if request.escalated_at else 0
        ),
    )


def requests_for_messages(ids: list[str]) -> dict[str, ApprovalRequest]:
    rows = (
        ApprovalRequest.objects.filter(pk__in=ids)
        .select_related("runtime", "session", "invoking_session", "answered_by")
        .prefetch_related("items")
    )
    return {str(row.pk): row for row in rows}


def channels_of(*, user: User) -> QuerySet[Channel]:
    """A person's own live channels (email, chat and phone)."""
    return Channel.objects.live().filter(owner=user).order_by("created_at", "id")


def webhooks() -> QuerySet[Channel]:
    return Channel.objects.live().filter(kind=ChannelKind.WEBHOOK).order_by("created_at", "id")


def with_last_sent(channels: QuerySet[Channel]) -> QuerySet[Channel]:
    """Each channel with `last_sent_at`, when a message last reached it (None: never yet)."""
    return channels.annotate(last_sent_at=Max("deliveries__sent_at"))


def webhooks_for(event: str) -> list[Channel]:
    """Live, unbroken webhooks subscribed to `event`."""
    return [hook for hook in webhooks().filter(broken_at__isnull=True) if event in (hook.events or [])]


def preference_of(*, user: User) -> Preference:
    """A person's preference (unsaved defaults when they never set one)."""
    return Preference.objects.filter(user=user).first() or Preference(user=user)


def open_digest_due(*, channel: Channel, now: dt.datetime) -> dt.datetime | None:
    """When the digest already waiting on `channel` goes out, if one is waiting."""
    from aimon_admin.notifications.choices import DeliveryStatus

    held = (
        Delivery.objects.filter(channel=channel, status=DeliveryStatus.HELD, next_attempt_at__gt=now)
        .order_by("next_attempt_at")
        .values_list("next_attempt_at", flat=True)
        .first()
    )
    return held


@dataclass(frozen=True)
class LogFilter:
    channel: int | None = None
    status: str = ""
    request: str = ""
    before: int | None = None  # keyset: deliveries with a smaller id


def delivery_log(*, user: User | None, filters: LogFilter, limit: int = LOG_PAGE_SIZE) -> list[Delivery]:
    """Deliveries newest first, keyset paged on id: all of them (operators' log, `user` None)
    or those to one person's own channels. One page plus one row, to know if there is more."""
    rows = Delivery.objects.select_related(
        "channel", "request", "request__runtime", "checkpoint"
    ).prefetch_related("attempt_rows")
    if user is not None:
        rows = rows.filter(channel__owner=user)
    if filters.channel is not None:
        rows = rows.filter(channel_id=filters.channel)
    if filters.status:
        rows = rows.filter(status=filters.status)
    if filters.request:
        rows = rows.filter(request_id=filters.request)
    if filters.before is not None:
        rows = rows.filter(id__lt=filters.before)
    return list(rows.order_by("-id")[: limit + 1])


def log_channels(*, user: User | None) -> QuerySet[Channel]:
    """The channels a log can be filtered by (removed ones too: their history stays)."""
    channels = Channel.objects.all()
    if user is not None:
        channels = channels.filter(owner=user)
    return channels.order_by("kind", "name", "id")


def broken_channels_of(*, user: User) -> QuerySet[Channel]:
    return channels_of(user=user).filter(~Q(broken_at=None))


REQUEST_DELIVERIES_MAX = 100


def deliveries_of_request(*, request_id: str, user: User | None) -> list[Delivery]:
    """A request's deliveries for its page's timeline, oldest first, with their channels and
    owners: all of them (`user` None, an operator) or those to one person's own channels.
    At most REQUEST_DELIVERIES_MAX (one per channel and event: a request reaches a few)."""
    rows = Delivery.objects.filter(request_id=request_id).select_related("channel", "channel__owner")
    if user is not None:
        rows = rows.filter(channel__owner=user)
    return list(rows.order_by("created_at", "id")[:REQUEST_DELIVERIES_MAX])
