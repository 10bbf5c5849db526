"""`load_config`'s webhooks (operator set-up from the command line, README.md; P4): read with
every error at FILE:LINE, nothing applied when anything is wrong, a given secret checked, a
made one printed once and never audited, the address guarded as on the notifications page."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from standardwebhooks.webhooks import Webhook

from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.notifications import services
from aimon_admin.notifications.choices import ChannelKind, NotificationEvent
from aimon_admin.notifications.config import WEBHOOK_CONFLICT
from aimon_admin.notifications.models import Channel
from aimon_admin.notifications.services.errors import SIGNING_KEY_MESSAGE
from aimon_admin.registry.models import McpServer
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db

GIVEN_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # 24 bytes, as the Standard Webhooks examples
GOOD = f"""\
mcpServers:
  git:
    command: uvx
webhooks:
  siem:
    url: https://93.184.216.34/aimon
    secret: {GIVEN_SECRET}
    events: [approval.requested, approval.escalated]
  chatops:
    url: https://93.184.216.34/chat
"""


def write(tmp_path: Path, text: str, name: str = "aimon.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(path: Path) -> str:
    out = io.StringIO()
    call_command("load_config", str(path), stdout=out)
    return out.getvalue()


def refused(path: Path) -> str:
    with pytest.raises(CommandError) as caught:
        load(path)
    return str(caught.value)


def nothing_applied() -> None:
    assert Channel.objects.count() == 0
    assert McpServer.objects.count() == 0
    assert not AuditEvent.objects.filter(action=AuditAction.CONFIG_LOADED).exists()


@pytest.fixture(autouse=True)
def public_only(settings: Any) -> None:
    settings.AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES = False  # the product's default


def test_a_good_file_adds_its_webhooks_and_prints_a_made_secret_once(tmp_path: Path) -> None:
    out = load(write(tmp_path, GOOD))
    siem = Channel.objects.get(name="siem")
    chatops = Channel.objects.get(name="chatops")
    assert (siem.kind, siem.owner, siem.target) == (ChannelKind.WEBHOOK, None, "https://93.184.216.34/aimon")
    assert siem.secret == GIVEN_SECRET
    assert siem.events == [NotificationEvent.REQUESTED, NotificationEvent.ESCALATED]
    assert chatops.events == [
        NotificationEvent.REQUESTED,
        NotificationEvent.ANSWERED,
        NotificationEvent.ESCALATED,
    ]
    assert chatops.secret.startswith("whsec_")
    assert chatops.secret != GIVEN_SECRET
    Webhook(chatops.secret)  # a secret the standard library takes
    assert "webhooks added: siem, chatops" in out
    assert f"webhook chatops: its signing secret, shown only now: {chatops.secret}" in out
    assert GIVEN_SECRET not in out  # the one the file gave is not printed back
    # Audited: each webhook added, and the load; neither secret in any event.
    added = AuditEvent.objects.filter(action=AuditAction.NOTIFICATION_CHANNEL_ADDED)
    assert sorted(e.subject for e in added) == ["chatops", "siem"]
    (loaded,) = AuditEvent.objects.filter(action=AuditAction.CONFIG_LOADED)
    assert loaded.details["webhooks_created"] == ["siem", "chatops"]
    for event in AuditEvent.objects.all():
        text = str(event.details)
        assert GIVEN_SECRET not in text
        assert chatops.secret not in text
    # The same file again: nothing added, no secret printed.
    again = load(write(tmp_path, GOOD))
    assert "webhooks already there: siem, chatops" in again
    assert "shown only now" not in again
    assert Channel.objects.count() == 2


@pytest.mark.parametrize(
    ("webhooks", "line", "message"),
    [
        ("  siem: https://x.example/hook\n", 5, "webhooks.siem must be a mapping"),
        ("  siem: {events: [approval.requested]}\n", 5, "webhooks.siem needs url"),
        (
            "  siem: {url: ftp://93.184.216.34/x}\n",
            5,
            "webhooks.siem.url: A webhook address starts with https://",
        ),
        ("  siem: {url: 42}\n", 5, "webhooks.siem.url must be a string"),
        (
            "  siem: {url: 'https://127.0.0.1/hook'}\n",
            5,
            "127.0.0.1 is a private, loopback or link-local address",
        ),
        ("  siem: {url: 'https://169.254.169.254/x'}\n", 5, "nothing is ever sent there"),
        ("  siem: {url: 'https://93.184.216.34/x', color: red}\n", 5, "unknown key 'color' in webhooks.siem"),
        ("  siem: {url: 'https://93.184.216.34/x', events: []}\n", 5, "webhooks.siem.events must be a list"),
        (
            "  siem: {url: 'https://93.184.216.34/x', events: [approval.test]}\n",
            5,
            "'approval.test' is not one of",
        ),
        (
            "  siem: {url: 'https://93.184.216.34/x', events: [approval.answered, approval.answered]}\n",
            5,
            "names approval.answered twice",
        ),
        (
            "  siem: {url: 'https://93.184.216.34/x', secret: not-a-secret}\n",
            5,
            SIGNING_KEY_MESSAGE.split("{")[0],
        ),
        (
            "  siem: {url: 'https://93.184.216.34/x', secret: whsec_c2hvcnQ=}\n",
            5,
            "whsec_ followed by 24 to 64",
        ),
        ("  siem: {url: 'https://93.184.216.34/x', secret: 'whsec_!!!'}\n", 5, "webhooks.siem.secret:"),
        ("  '': {url: 'https://93.184.216.34/x'}\n", 5, "a webhook's name is 1 to 100 characters"),
        ("  - {url: 'https://93.184.216.34/x'}\n", 5, "webhooks must be a mapping"),
    ],
)
def test_each_bad_value_fails_at_its_line_and_nothing_is_applied(
    tmp_path: Path, webhooks: str, line: int, message: str
) -> None:
    text = "mcpServers:\n  git:\n    command: uvx\nwebhooks:\n" + webhooks
    path = write(tmp_path, text)
    error = refused(path)
    assert f"{path}:{line}: " in error
    assert message in error
    assert "nothing was applied (1 error)" in error
    nothing_applied()


def test_a_bad_secret_is_never_repeated_in_the_error(tmp_path: Path) -> None:
    wrong = "whsec_dG9vLXNob3J0LWJ1dC1zZWNyZXQ="
    error = refused(
        write(tmp_path, f"webhooks:\n  siem: {{url: 'https://93.184.216.34/x', secret: {wrong}}}\n")
    )
    assert "webhooks.siem.secret" in error
    assert wrong not in error


def test_a_webhook_that_exists_differently_is_refused_and_nothing_is_applied(tmp_path: Path) -> None:
    services.webhook_create(name="siem", url="https://93.184.216.34/elsewhere", actor=TEST_ACTOR)
    path = write(tmp_path, GOOD)
    error = refused(path)
    assert (
        f"{path}:5: webhooks.siem: " + WEBHOOK_CONFLICT.format(name="siem", what="another address") in error
    )
    assert Channel.objects.count() == 1  # chatops not added either
    assert McpServer.objects.count() == 0


def test_a_given_secret_that_differs_from_the_stored_one_is_refused(tmp_path: Path) -> None:
    services.webhook_create(
        name="siem",
        url="https://93.184.216.34/aimon",
        events=[NotificationEvent.REQUESTED, NotificationEvent.ESCALATED],
        actor=TEST_ACTOR,
    )
    error = refused(write(tmp_path, GOOD))
    assert WEBHOOK_CONFLICT.format(name="siem", what="another secret") in error


def test_private_addresses_load_when_the_operator_allows_them(tmp_path: Path, settings: Any) -> None:
    # The same guard as the page: AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES lets a LAN receiver in.
    settings.AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES = True
    load(write(tmp_path, "webhooks:\n  lan: {url: 'http://10.1.2.3/hook'}\n"))
    assert Channel.objects.get(name="lan").target == "http://10.1.2.3/hook"


def test_webhook_create_checks_a_given_secret() -> None:
    with pytest.raises(services.ChannelError) as caught:
        services.webhook_create(
            name="siem", url="https://93.184.216.34/x", secret="whsec_short", actor=TEST_ACTOR
        )
    assert caught.value.field == "secret"
    channel, secret = services.webhook_create(
        name="siem", url="https://93.184.216.34/x", secret=GIVEN_SECRET, actor=TEST_ACTOR
    )
    assert (channel.secret, secret) == (GIVEN_SECRET, GIVEN_SECRET)
