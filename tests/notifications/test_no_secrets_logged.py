"""A channel's secrets never reach a log record, the delivery log or the audit log (P1, P4;
A1: "never a secret"): the token inside an Apprise URL, a password in its user part, and a
webhook's signing secret, while messages are sent and fail, every record at DEBUG captured."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from aimon_admin.accounts.models import User
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import services
from aimon_admin.notifications.choices import ChannelKind
from aimon_admin.notifications.models import Channel, DeliveryAttempt
from tests.notifications.receivers import http_receiver

pytestmark = pytest.mark.django_db

URL_TOKEN = "urltoken-5ecret-0042"
URL_PASSWORD = "ntfy-pa55word-0042"


class Everything(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.name} {self.format(record)}")


@pytest.fixture
def captured() -> Iterator[Everything]:
    handler = Everything()
    # The root and Django's own loggers at DEBUG; the notification library's keeps the level
    # the product gives it.
    loggers = [logging.getLogger(), logging.getLogger("django")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    yield handler
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_no_channel_secret_is_logged_sent_or_audited(
    captured: Everything, open_request: Callable[..., ApprovalRequest], approver: User, settings: Any
) -> None:
    with http_receiver(answer=500) as failing, http_receiver() as working:
        actor = Actor.for_user(approver)
        services.channel_add(
            owner=approver, kind=ChannelKind.APPRISE, name="json", actor=actor,
            target=f"json://{failing.base}/hook/{URL_TOKEN}?token={URL_TOKEN}",
        )  # fmt: skip
        services.channel_add(
            owner=approver, kind=ChannelKind.APPRISE, name="ntfy", actor=actor,
            target=f"ntfy://alice:{URL_PASSWORD}@{working.base}/{URL_TOKEN}",
        )  # fmt: skip
        _, secret = services.webhook_create(name="hook", url=failing.url(f"/in/{URL_TOKEN}"), actor=actor)
        open_request(session_id="s-1", principal="alice")
        assert working.wait(1)
        assert len(failing.got) == 2
    secrets = (URL_TOKEN, URL_PASSWORD, secret, secret.removeprefix("whsec_"))
    text = "\n".join(captured.lines)
    assert "Failed to send JSON POST notification" in text  # what the library says was captured
    for value in secrets:
        assert value not in text
        assert value not in str(list(AuditEvent.objects.values_list("details", flat=True)))
        assert value not in str(list(DeliveryAttempt.objects.values_list("detail", flat=True)))
        assert value not in str(list(Channel.objects.values_list("shown_target", "last_error")))
