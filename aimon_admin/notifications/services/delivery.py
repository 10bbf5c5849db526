"""Deliveries (P1, P2, P4): a request's event becomes one delivery per channel to tell, each
sent, retried with back-off, logged attempt by attempt; a channel that keeps failing is
marked broken and its owner told on their page.

Nothing lost (P2). What a request owes is written in approvals' own transaction (core.hooks
calls `fanout_owe` inside it), so it exists exactly when the change committed, whatever
Redis or a worker did after: its opening writes two Fanout rows, REQUESTED, due at once,
and ANSWERED, due once the request has closed (answered, cancelled or expired: `closed_at`),
so the close writes nothing more; an escalation writes ESCALATED. After each commit a hint
queues the fan-out at once; a hint lost with Redis costs only time: beat's sweep queues the
fan-out of every row due for `HINT_GRACE`. The fan-out turns a row into one delivery per
channel, once (it locks the row and marks it done in the same transaction). Whether the
request is still pending decides only whom a person's message would reach, never whether a
webhook is owed its message: a request answered before its opening's fan-out ran still
owes both `approval.requested` and `approval.answered`.

A signed audit checkpoint (A4) is owed the same way (`checkpoint_owe`, inside the signing's
transaction, when a webhook takes `audit.checkpoint`): one delivery per such webhook, its
body's data the checkpoint document exactly as published, so a witness elsewhere holds what
the log's owner cannot take back. Only webhooks: a person's channel is never sent one.

Queued once (P2: a burst never floods the queue). Every task queued for a row by the sweep
or a fan-out first takes the row's lease (`lease_until`, `QUEUED_LEASE`); the sweep queues
only rows with no lease or a lapsed one, so a delivery already queued is not queued again
each time beat runs, only once its message can be taken to be lost (Redis restarted
without its data). A retry is the same: a failed send is due again after its back-off and
the sweep queues it then. And the sweep never adds to a backlog (tasks.SWEEP_ROOM): a
hint's fan-out waiting in one has no lease, and is not queued twice for that.

At least once (P4). A send starts only by claiming its row with a conditional update
(PENDING -> SENDING, a claim token, a lease), so two workers never send it at once; a
worker that dies after its claim leaves a lapsed lease, and the sweep hands the row back.
A worker (or PostgreSQL) that dies after the receiver took the message and before the
outcome was written sends it again: the message id, Standard Webhooks' webhook-id, is the
delivery's own `key`, the same on every try, so a receiver dedupes by it
(docs/operations.md, Receiving webhooks).

Audited (A1): a channel marked broken or working again, and a delivery given up for good —
the moments someone was not told. Not each attempt or each message sent: the delivery log
records those, and an audit event per message would double the audit log's writes for every
request opened.

Over 500 lines on purpose: one delivery's whole life (owed, fanned out, taken under a lease,
sent, retried, swept, given up) in one module, because its exactly-once reasoning spans every
step; split, each half would rely on guarantees written in the other.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from aimon_admin.approvals.choices import RequestStatus
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core import metrics
from aimon_admin.core.actors import Actor
from aimon_admin.core.encryption import is_unreadable
from aimon_admin.notifications import policy, selectors, senders
from aimon_admin.notifications.choices import (
    AttemptOutcome,
    ChannelKind,
    DeliveryStatus,
    NotificationEvent,
)
from aimon_admin.notifications.models import Channel, Delivery, DeliveryAttempt, Fanout
from aimon_admin.notifications.services.channels import SUBJECT_TYPE, _described
from aimon_admin.notifications.services.errors import REMOVED_MESSAGE, ChannelError

logger = logging.getLogger(__name__)

SENDER = Actor.system("notifications")
CLOSED_BEFORE_SENT = "The request was answered or closed before this was sent."
CHANNEL_GONE = "The channel was removed."
CHANNEL_BROKEN = "The channel is marked broken; nothing is sent there until a test succeeds."
UNDECRYPTABLE = (
    "The channel's stored address or signing secret cannot be decrypted with the configured keys "
    "(a key was dropped too early, or the value was changed in the database), so nothing was sent: "
    "restore the key, or add the channel again."
)
UNEXPECTED = "Unexpected error while sending ({name}); see the server log."
DIGEST_BATCH = 100
# A row due is left this long to the hint queued after the commit that made it due (within
# milliseconds, unless Redis is down) before the sweep queues its fan-out.
HINT_GRACE = dt.timedelta(seconds=10)
# A task queued for a row is taken to be lost (Redis restarted without its data) once this
# has passed with the row not done: the sweep queues another. Longer than a burst's queue
# takes to drain, so a message waiting its turn is not queued twice.
QUEUED_LEASE = dt.timedelta(minutes=5)


def _lease() -> dt.timedelta:
    return dt.timedelta(seconds=float(settings.AIMON_NOTIFY_TIMEOUT_SECONDS) * 3 + 30)


# --- Fan-out ----------------------------------------------------------------------------------------


def _escalation_rows(request: ApprovalRequest, now: dt.datetime) -> list[Delivery]:
    """Nobody answered in time (P2): the operators and the owner, each channel at once. Never
    held: neither quiet hours nor a digest keep an escalation back."""
    return [
        Delivery(
            request=request,
            channel=channel,
            event=NotificationEvent.ESCALATED,
            status=DeliveryStatus.PENDING,
            next_attempt_at=now,
        )
        for person in selectors.escalation_recipients_for(request=request)
        for channel in selectors.channels_of(user=person).filter(broken_at__isnull=True)
    ]


def _person_rows(request: ApprovalRequest, now: dt.datetime) -> list[Delivery]:
    rows = []
    for person in selectors.recipients_for(request=request):
        pref = selectors.preference_of(user=person)
        quiet_end = policy.quiet_until(
            now, start=pref.quiet_start, end=pref.quiet_end, timezone=pref.timezone
        )
        for channel in selectors.channels_of(user=person).filter(broken_at__isnull=True):
            open_due = selectors.open_digest_due(channel=channel, now=now) if pref.digest_minutes else None
            due = policy.held_until(
                now, digest_minutes=pref.digest_minutes, open_digest_due=open_due, quiet_end=quiet_end
            )
            rows.append(
                Delivery(
                    request=request,
                    channel=channel,
                    event=NotificationEvent.REQUESTED,
                    status=DeliveryStatus.HELD if due else DeliveryStatus.PENDING,
                    batched=due is not None,
                    next_attempt_at=due or now,
                )
            )
    return rows


def fanout_owe(*, request_id: str, events: Sequence[str]) -> None:
    """Record what a request owes its channels, one row per event, in the caller's
    transaction (approvals' own: core.hooks); once per event."""
    rows = [Fanout(request_id=request_id, event=event) for event in events]
    Fanout.objects.bulk_create(rows, ignore_conflicts=True)


def _rows_owed(request: ApprovalRequest, event: str, now: dt.datetime) -> list[Delivery]:
    """Opened: the people who answer it (P1); escalated (nobody answered in time, P2): the
    operators and the owner; both only while it is still open, people being asked only what
    they can still answer. Every event: the webhooks that take it, whatever became of the
    request since."""
    still_open = request.status == RequestStatus.PENDING and request.expires_at > now
    rows: list[Delivery] = []
    if still_open and event == NotificationEvent.REQUESTED:
        rows = _person_rows(request, now)
    elif still_open and event == NotificationEvent.ESCALATED:
        rows = _escalation_rows(request, now)
    hooks = selectors.webhooks_for(event)
    return rows + [
        Delivery(request=request, channel=hook, event=event, next_attempt_at=now) for hook in hooks
    ]


def checkpoint_owe(*, checkpoint_id: str) -> None:
    """Record what a signed checkpoint owes (A4), in the caller's transaction (the signing's
    own: core.hooks), once; nothing when no webhook takes checkpoints."""
    if selectors.webhooks_for(NotificationEvent.CHECKPOINT):
        row = Fanout(checkpoint_id=int(checkpoint_id), event=NotificationEvent.CHECKPOINT)
        Fanout.objects.bulk_create([row], ignore_conflicts=True)


def _fanned_out(
    subject: dict[str, object], event: str, rows_owed: Callable[[dt.datetime], list[Delivery] | None]
) -> list[int]:
    """Turn the owed row of `subject`'s event into the deliveries `rows_owed` makes, once (a
    second call, or one while another holds the row, makes none; none either while
    `rows_owed` says it is not due, None), and return the ids due now."""
    now = timezone.now()
    with transaction.atomic():
        owed = (
            Fanout.objects.select_for_update(skip_locked=True)
            .filter(**subject, event=event, fanned_out_at__isnull=True)
            .first()
        )
        if owed is None:
            return []
        rows = rows_owed(now)
        if rows is None:
            return []
        Delivery.objects.bulk_create(rows, ignore_conflicts=True)
        Fanout.objects.filter(pk=owed.pk).update(fanned_out_at=now, lease_until=None, deliveries=len(rows))
    return list(
        Delivery.objects.filter(
            **subject, event=event, status=DeliveryStatus.PENDING, next_attempt_at__lte=now
        ).values_list("id", flat=True)
    )


def request_fan_out(*, request_id: str, event: NotificationEvent | str) -> list[int]:
    """Turn what a request's event owes into deliveries, once ("answered" none while the
    request is open), and return the ids due now."""

    def rows_owed(now: dt.datetime) -> list[Delivery] | None:
        request = ApprovalRequest.objects.select_related("runtime", "runtime__owner").get(pk=request_id)
        if event == NotificationEvent.ANSWERED and request.status == RequestStatus.PENDING:
            return None  # an answer to some of its skills: owed once it closes
        return _rows_owed(request, event, now)

    return _fanned_out({"request_id": request_id}, event, rows_owed)


def checkpoint_fan_out(*, checkpoint_id: str) -> list[int]:
    """Turn what a signed checkpoint owes (A4) into one delivery per webhook that takes
    checkpoints, once, and return the ids due now."""

    def rows_owed(now: dt.datetime) -> list[Delivery]:
        return [
            Delivery(checkpoint_id=int(checkpoint_id), channel=hook, event=event, next_attempt_at=now)
            for hook in selectors.webhooks_for(event)
        ]

    event = NotificationEvent.CHECKPOINT
    return _fanned_out({"checkpoint_id": int(checkpoint_id)}, event, rows_owed)


@transaction.atomic
def channel_test(*, channel: Channel, actor: Actor) -> Delivery:
    """*Send a test*: a test message to `channel`, due now and sent once this commits (inline
    when tasks run eagerly). Its outcome is in the delivery log, not the audit log: it changes
    nothing but, on success, a broken channel's mark (that is audited)."""
    channel = Channel.objects.get(pk=channel.pk)
    if channel.removed_at is not None:
        raise ChannelError(REMOVED_MESSAGE)
    delivery = Delivery.objects.create(
        channel=channel, event=NotificationEvent.TEST, next_attempt_at=timezone.now()
    )
    transaction.on_commit(lambda: _queue([delivery.pk]))
    return delivery


def _queue(ids: list[int]) -> None:
    """Queue each delivery's send (inline when tasks run eagerly); a queue that cannot be
    reached leaves them due for the sweep."""
    from aimon_admin.notifications import tasks

    tasks.queue_deliveries(ids)


# --- Queued once ------------------------------------------------------------------------------------


def _take(rows: QuerySet, limit: int) -> list:  # type: ignore[type-arg]
    """Up to `limit` of `rows` with no task queued for them (no lease, or a lapsed one), each
    leased now for `QUEUED_LEASE`: the caller queues one task per row. Two sweeps at once
    take different rows (PostgreSQL: SKIP LOCKED, locking these rows only)."""
    now = timezone.now()
    with transaction.atomic():
        taken = list(
            rows.filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
            .select_for_update(skip_locked=True, of=("self",))
            .order_by("pk")[:limit]
        )
        rows.model.objects.filter(pk__in=[row.pk for row in taken]).update(lease_until=now + QUEUED_LEASE)
    return taken


def deliveries_take(*, ids: Sequence[int]) -> list[int]:
    """Of these deliveries, those waiting to be sent with no task queued for them, leased:
    the caller queues one send for each."""
    if not ids:
        return []
    rows = Delivery.objects.filter(pk__in=ids, status=DeliveryStatus.PENDING)
    return [row.pk for row in _take(rows, len(ids))]


def leases_end(*, fanouts: Sequence[int] = (), deliveries: Sequence[int] = ()) -> None:
    """No task could be queued for these rows (the broker is down): their leases end now, so
    the sweep queues them at its next run."""
    Fanout.objects.filter(pk__in=fanouts, fanned_out_at__isnull=True).update(lease_until=None)
    waiting = [DeliveryStatus.PENDING, DeliveryStatus.HELD]
    Delivery.objects.filter(pk__in=deliveries, status__in=waiting).update(lease_until=None)


# --- Sending ----------------------------------------------------------------------------------------


def _outgoing(
    delivery: Delivery, channel: Channel, requests: list[ApprovalRequest], now: dt.datetime
) -> senders.Outgoing:
    """The message in each form its channel takes: words, a webhook body, an email's HTML."""
    message_id = f"msg_{delivery.key.hex}"
    email = channel.kind == ChannelKind.EMAIL
    if delivery.event == NotificationEvent.CHECKPOINT:  # A4: only webhooks take it
        return senders.Outgoing(
            title=NotificationEvent.CHECKPOINT.label,
            text="",
            webhook_body=policy.checkpoint_payload(delivery.checkpoint.document, now),
            message_id=message_id,
        )
    if delivery.event == NotificationEvent.TEST:
        return senders.Outgoing(
            title=policy.TEST_MESSAGE.title,
            text=policy.TEST_MESSAGE.text,
            webhook_body=policy.webhook_payload(None, NotificationEvent.TEST, now),
            message_id=message_id,
            html=senders.render_email_html({"message": policy.TEST_MESSAGE, "requests": []}) if email else "",
        )
    facts = [selectors.request_facts(request=request) for request in requests]
    if len(facts) == 1:
        message = policy.request_message(facts[0], delivery.event)
    else:
        message = policy.digest_message(facts)
    return senders.Outgoing(
        title=message.title,
        text=message.text,
        url=facts[0].url if len(facts) == 1 else selectors.inbox_link(),
        webhook_body=policy.webhook_payload(facts[0], delivery.event, now),
        message_id=message_id,
        html=senders.render_email_html(
            {
                "message": message,
                "requests": facts,
                "event": delivery.event,
                "note": policy.LINK_NOTE,
                "escalation": (
                    policy.escalation_words(facts[0])
                    if delivery.event == NotificationEvent.ESCALATED and len(facts) == 1
                    else ""
                ),
            }
        )
        if email
        else "",
    )


def _send(channel: Channel, outgoing: senders.Outgoing) -> str:
    if channel.kind == ChannelKind.EMAIL:
        return senders.send_email(channel.target, outgoing)
    if channel.kind == ChannelKind.APPRISE:
        return senders.send_apprise(channel.target, outgoing)
    return senders.send_webhook(channel.target, channel.secret, outgoing)


@dataclass
class Tried:
    outcome: AttemptOutcome
    detail: str
    duration_ms: int


def _try(channel: Channel, outgoing: senders.Outgoing) -> Tried:
    # Fail closed: never send with a secret missing (core.encryption.Unreadable); refused, so
    # it is given up at once rather than retried.
    if is_unreadable(channel.target, channel.secret):
        return Tried(AttemptOutcome.REFUSED, UNDECRYPTABLE, 0)
    started = time.monotonic()
    try:
        detail = _send(channel, outgoing)
        outcome = AttemptOutcome.SENT
    except senders.SendError as exc:
        detail = exc.message
        outcome = AttemptOutcome.REFUSED if exc.refused else AttemptOutcome.FAILED
    except Exception as exc:  # a library's own bug must not leave the row claimed forever
        logger.exception("sending to channel %s failed unexpectedly", channel.pk)
        detail = UNEXPECTED.format(name=type(exc).__name__)
        outcome = AttemptOutcome.FAILED
    metrics.NOTIFICATION_ATTEMPTS.labels(channel.kind, outcome).inc()
    return Tried(outcome, policy.shorten(detail, 500), int((time.monotonic() - started) * 1000))


def _claim(ids: list[int], status: DeliveryStatus) -> tuple[uuid.UUID, list[Delivery]]:
    now = timezone.now()
    token = uuid.uuid4()
    Delivery.objects.filter(pk__in=ids, status=status, next_attempt_at__lte=now).update(
        status=DeliveryStatus.SENDING, claim=token, lease_until=now + _lease()
    )
    rows = list(
        Delivery.objects.filter(claim=token)
        .select_related("channel", "channel__owner", "checkpoint")
        .order_by("id")
    )
    return token, rows


def _finish(rows: list[Delivery], status: DeliveryStatus, why: str) -> None:
    Delivery.objects.filter(pk__in=[r.pk for r in rows], status=DeliveryStatus.SENDING).update(
        status=status, last_error=why, claim=None, lease_until=None
    )


def _still_open(request: ApprovalRequest | None, now: dt.datetime) -> bool:
    return request is not None and request.status == RequestStatus.PENDING and request.expires_at > now


def delivery_send(*, delivery_id: int) -> str | None:
    """Send one due delivery, once: returns its status afterwards, or None when it was not this
    call's to send (another has it, it is not due, or it is already done)."""
    token, rows = _claim([delivery_id], DeliveryStatus.PENDING)
    if not rows:
        return None
    return _send_rows(token, rows)


def digest_send(*, channel_id: int) -> int:
    """Send a channel's held deliveries that are due in one message (a digest, or what waited
    out quiet hours), `DIGEST_BATCH` requests a message; returns how many requests it named."""
    named = 0
    while True:
        due = list(
            Delivery.objects.filter(
                channel_id=channel_id, status=DeliveryStatus.HELD, next_attempt_at__lte=timezone.now()
            ).values_list("id", flat=True)[:DIGEST_BATCH]
        )
        if not due:
            return named
        token, rows = _claim(due, DeliveryStatus.HELD)
        if not rows:
            return named
        _send_rows(token, rows)
        named += Delivery.objects.filter(pk__in=[r.pk for r in rows], status=DeliveryStatus.SENT).count()
        if len(due) < DIGEST_BATCH:
            return named


def _send_rows(token: uuid.UUID, rows: list[Delivery]) -> str:
    """Send claimed rows of one channel as one message and record the outcome on each."""
    now = timezone.now()
    channel = rows[0].channel
    if channel.removed_at is not None:
        _finish(rows, DeliveryStatus.SKIPPED, CHANNEL_GONE)
        return DeliveryStatus.SKIPPED
    if channel.broken_at is not None and rows[0].event != NotificationEvent.TEST:
        _finish(rows, DeliveryStatus.SKIPPED, CHANNEL_BROKEN)
        return DeliveryStatus.SKIPPED
    by_id = selectors.requests_for_messages([str(r.request_id) for r in rows if r.request_id])
    live = []
    for row in rows:
        request = by_id.get(str(row.request_id)) if row.request_id else None
        # A person is asked to answer only what is still open; a webhook gets every event.
        if (
            row.event in (NotificationEvent.REQUESTED, NotificationEvent.ESCALATED)
            and not channel.is_webhook
            and not _still_open(request, now)
        ):
            _finish([row], DeliveryStatus.SKIPPED, CLOSED_BEFORE_SENT)
            continue
        live.append(row)
    if not live:
        return DeliveryStatus.SKIPPED
    ordered = [by_id[str(r.request_id)] for r in live if r.request_id]
    tried = _try(channel, _outgoing(live[0], channel, ordered, now))
    return _record(token, live, tried)


def _record(token: uuid.UUID, rows: list[Delivery], tried: Tried) -> str:
    """Write the attempt on each row, the channel's run of failures, and what comes next."""
    now = timezone.now()
    with transaction.atomic():
        channel = Channel.objects.select_for_update().get(pk=rows[0].channel_id)
        mine = list(Delivery.objects.select_for_update().filter(pk__in=[r.pk for r in rows], claim=token))
        if not mine:
            return DeliveryStatus.SENDING  # its lease lapsed and the sweep handed it on
        sent = tried.outcome == AttemptOutcome.SENT
        newly_broken = _channel_outcome(channel, sent, tried.detail, now)
        status = DeliveryStatus.SENT
        for row in mine:
            number = row.attempts + 1
            DeliveryAttempt.objects.create(
                delivery=row,
                number=number,
                outcome=tried.outcome,
                detail=tried.detail,
                duration_ms=tried.duration_ms,
            )
            row.attempts = number
            row.claim = None
            row.lease_until = None
            if sent:
                row.status, row.sent_at, row.last_error = DeliveryStatus.SENT, now, ""
            else:
                row.last_error = tried.detail
                give_up = (
                    tried.outcome == AttemptOutcome.REFUSED
                    or row.event == NotificationEvent.TEST
                    or number >= settings.AIMON_NOTIFY_MAX_ATTEMPTS
                    or channel.broken_at is not None
                )
                if give_up:
                    row.status = DeliveryStatus.FAILED
                    # A broken channel's own event names what it gave up (below).
                    if row.event != NotificationEvent.TEST and not newly_broken:
                        _audit_gave_up(row, channel, tried.detail)
                else:
                    row.status = DeliveryStatus.HELD if row.batched else DeliveryStatus.PENDING
                    row.next_attempt_at = now + dt.timedelta(seconds=policy.backoff_seconds(number))
            row.save(
                update_fields=[
                    "attempts",
                    "claim",
                    "lease_until",
                    "status",
                    "sent_at",
                    "last_error",
                    "next_attempt_at",
                ]
            )
            status = row.status
    return status


def _channel_outcome(channel: Channel, sent: bool, detail: str, now: dt.datetime) -> bool:
    """Count the channel's run of failures; mark it broken after N in a row (True then), or
    working again after a success. Both audited."""
    if sent:
        if channel.consecutive_failures == 0 and channel.broken_at is None:
            return False
        mended = channel.broken_at is not None
        channel.consecutive_failures, channel.broken_at, channel.last_error = 0, None, ""
        channel.save(update_fields=["consecutive_failures", "broken_at", "last_error"])
        if mended:
            audit_record(
                action=AuditAction.NOTIFICATION_CHANNEL_MENDED,
                actor=SENDER,
                subject_type=SUBJECT_TYPE,
                subject=channel.name,
                details=_described(channel),
            )
        return False
    channel.consecutive_failures += 1
    channel.last_error = detail
    newly_broken = (
        channel.broken_at is None and channel.consecutive_failures >= settings.AIMON_NOTIFY_BROKEN_AFTER
    )
    if newly_broken:
        channel.broken_at = now
        # What waited for it will not be sent: given up with it, named in the one event.
        waiting = Delivery.objects.filter(
            channel=channel, status__in=[DeliveryStatus.PENDING, DeliveryStatus.HELD]
        )
        given_up = list(waiting.values_list("id", flat=True)[:100])
        waiting.update(status=DeliveryStatus.FAILED, last_error=CHANNEL_BROKEN)
        audit_record(
            action=AuditAction.NOTIFICATION_CHANNEL_BROKEN,
            actor=SENDER,
            level=AuditLevel.WARNING,
            subject_type=SUBJECT_TYPE,
            subject=channel.name,
            details={
                **_described(channel),
                "failures": channel.consecutive_failures,
                "last_error": detail,
                "given_up_delivery_ids": given_up,
            },
        )
    channel.save(update_fields=["consecutive_failures", "broken_at", "last_error"])
    return newly_broken


def _audit_gave_up(row: Delivery, channel: Channel, detail: str) -> None:
    audit_record(
        action=AuditAction.NOTIFICATION_GAVE_UP,
        actor=SENDER,
        level=AuditLevel.WARNING,
        subject_type=SUBJECT_TYPE,
        subject=channel.name,
        details={
            **_described(channel),
            "delivery_id": row.pk,
            **(
                {"checkpoint_id": row.checkpoint_id}
                if row.checkpoint_id
                else {"request_id": str(row.request_id)}
            ),
            "event": row.event,
            "attempts": row.attempts,
            "last_error": detail,
        },
    )


# --- The sweep ----------------------------------------------------------------------------------------


@dataclass
class Sweep:
    """What the sweep took to queue (each row leased): fan-outs owed, deliveries due, and
    the held deliveries due by channel (a digest each)."""

    fanouts: list[Fanout] = field(default_factory=list)
    due: list[int] = field(default_factory=list)
    digests: dict[int, list[int]] = field(default_factory=dict)
    reclaimed: int = 0


def deliveries_sweep(*, limit: int = 500) -> Sweep:
    """Whatever the web process or a worker could not finish: fan-outs due for `HINT_GRACE`
    (their hint was lost), sends whose worker died (lease lapsed), and every delivery and
    digest now due, each not already queued. Hands back lapsed claims and leases what it
    found: the caller queues it."""
    now = timezone.now()
    result = Sweep()
    lapsed = Delivery.objects.filter(status=DeliveryStatus.SENDING, lease_until__lt=now)
    result.reclaimed = lapsed.filter(batched=False).update(
        status=DeliveryStatus.PENDING, claim=None, lease_until=None
    )
    result.reclaimed += lapsed.filter(batched=True).update(
        status=DeliveryStatus.HELD, claim=None, lease_until=None
    )
    settled = now - HINT_GRACE
    owed = Fanout.objects.filter(fanned_out_at__isnull=True).filter(
        Q(event=NotificationEvent.ANSWERED, request__closed_at__lt=settled)
        | (~Q(event=NotificationEvent.ANSWERED) & Q(created_at__lt=settled))
    )
    result.fanouts = _take(owed, limit)
    due = Delivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now)
    result.due = [row.pk for row in _take(due, limit)]
    held = Delivery.objects.filter(status=DeliveryStatus.HELD, next_attempt_at__lte=now)
    for row in _take(held, limit):
        result.digests.setdefault(row.channel_id, []).append(row.pk)
    return result
