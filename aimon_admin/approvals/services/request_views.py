"""A request page's view (issue 17 item 8): who first opened it, and when."""

from __future__ import annotations

from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals.models import ApprovalRequest, RequestView


def request_view_record(*, request: ApprovalRequest, user: User) -> None:
    """Record `user`'s first view of `request`'s page; a later view leaves it as it was.

    One INSERT that a unique constraint turns into nothing on a second visit (no read first,
    so two tabs opened at once record one view). It touches no other row: the request, its
    items and grants stay exactly as they were (P1: a GET answers nothing)."""
    RequestView.objects.bulk_create(
        [RequestView(request=request, viewer=user, viewed_at=timezone.now())], ignore_conflicts=True
    )
