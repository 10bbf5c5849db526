"""What a request's timeline says was seen: who first opened its page, and when the runtime
was first sent the request closed (woken, if it was waiting on it)."""

from __future__ import annotations

import logging

from django.db import DatabaseError, transaction
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import RequestStatus
from aimon_admin.approvals.models import ApprovalRequest, RequestView

logger = logging.getLogger(__name__)


def request_view_record(*, request: ApprovalRequest, user: User) -> None:
    """Record `user`'s first view of `request`'s page; a later view leaves it as it was.

    One INSERT that a unique constraint turns into nothing on a second visit (no read first,
    so two tabs opened at once record one view). It touches no other row: the request, its
    items and grants stay exactly as they were (P1: a GET answers nothing)."""
    RequestView.objects.bulk_create(
        [RequestView(request=request, viewer=user, viewed_at=timezone.now())], ignore_conflicts=True
    )


def request_answer_sent(*, request: ApprovalRequest, waited: bool) -> None:
    """Record that the API is sending the runtime `request` closed, if it is the first time:
    `waited` says whether that response ends a long-poll that was waiting on it (woken).

    One conditional UPDATE (of two reads at once, one records). It is bookkeeping for the
    timeline, never part of the answer: if it cannot be written the answer still goes out,
    and the failure is logged."""
    if request.status == RequestStatus.PENDING or request.answer_sent_at is not None:
        return
    now = timezone.now()
    try:
        with transaction.atomic():
            ApprovalRequest.objects.filter(pk=request.pk, answer_sent_at__isnull=True).update(
                answer_sent_at=now, answer_sent_to_waiter=waited
            )
    except DatabaseError as exc:
        logger.warning("could not record that request %s's answer was sent: %s", request.pk, exc)
