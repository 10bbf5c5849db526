"""Each message sent to a notification channel is counted in /metrics by the channel's kind
and the attempt's outcome, as the delivery log records it (a real receiver; a port where
nothing listens)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import services
from aimon_admin.notifications.choices import AttemptOutcome
from aimon_admin.notifications.models import DeliveryAttempt
from tests.core.metrics_support import moved, scrape
from tests.notifications.receivers import http_receiver
from tests.ports import free_port

pytestmark = pytest.mark.django_db

ATTEMPTS = "aimon_notification_attempts_total"
OPS = Actor.system("pytest")


def test_each_attempt_is_counted_by_channel_kind_and_outcome(
    open_request: Callable[..., ApprovalRequest],
) -> None:
    before = scrape()
    with http_receiver() as receiver:
        nowhere = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
        services.webhook_create(name="ops hook", url=receiver.url(), events=None, actor=OPS)
        services.webhook_create(name="gone hook", url=nowhere, events=None, actor=OPS)
        open_request(session_id="s-1", principal="alice")
        receiver.wait(1)
    after = scrape()

    assert sorted(DeliveryAttempt.objects.values_list("outcome", flat=True)) == [
        AttemptOutcome.FAILED,
        AttemptOutcome.SENT,
    ]
    assert moved(before, after, ATTEMPTS, channel_kind="WEBHOOK", outcome="SENT") == 1
    assert moved(before, after, ATTEMPTS, channel_kind="WEBHOOK", outcome="FAILED") == 1
    assert after.total(ATTEMPTS) - before.total(ATTEMPTS) == 2
