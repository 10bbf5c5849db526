"""Signed audit checkpoints sent to the webhooks that witness the log (A4), signed as Standard
Webhooks specifies (P4).

A real receiver on 127.0.0.1 verifies each body's signature with the `standardwebhooks`
library and compares its data with the checkpoint as published; the offline verifier checks
what a witness kept. Only webhooks that take `audit.checkpoint` get one; a person's channel
never does. What a checkpoint owes is written in the signing's own transaction, so a hint
lost after the commit costs only time: beat's sweep sends it, once.
"""

from __future__ import annotations

import io
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from aimon_admin.accounts.models import User
from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.audit import checkpoints, publication, signing
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditCheckpoint, AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import services, tasks
from aimon_admin.notifications.choices import (
    APPROVAL_EVENTS,
    AttemptOutcome,
    ChannelKind,
    DeliveryStatus,
    NotificationEvent,
)
from aimon_admin.notifications.models import Channel, Delivery, Fanout
from aimon_admin.runtimes.models import AgentRuntime
from tests.accounts.factories import logged_in
from tests.audit.helpers import record_events
from tests.audit.test_offline_verifier import run_verifier
from tests.notifications.conftest import later
from tests.notifications.receivers import HttpReceiver, http_receiver

pytestmark = pytest.mark.django_db

OPS = Actor.system("pytest")
CHECKPOINT = NotificationEvent.CHECKPOINT


@pytest.fixture
def key(settings: Any, tmp_path: Path) -> Any:
    """A signing key, and the published checkpoints in this test's own directory."""
    path = tmp_path / "key.pem"
    created = signing.create_key(path)
    settings.AIMON_AUDIT_SIGNING_KEY = str(path)
    settings.AIMON_AUDIT_CHECKPOINT_DIR = str(tmp_path / "published")
    checkpoints.refusal_forget()
    yield created
    checkpoints.refusal_forget()


@pytest.fixture
def sign(django_capture_on_commit_callbacks: Any) -> Any:
    """Sign a checkpoint as beat's task does; what runs after its commit (the hint) runs."""

    def sign_() -> AuditCheckpoint:
        record_events(2)
        with django_capture_on_commit_callbacks(execute=True):
            return checkpoints.checkpoint_sign()

    return sign_


def witness(receiver: HttpReceiver, name: str = "witness") -> tuple[Channel, str]:
    return services.webhook_create(name=name, url=receiver.url(), events=[CHECKPOINT], actor=OPS)


def verified(receiver: HttpReceiver, secret: str) -> list[dict[str, Any]]:
    """Each body the receiver got, its Standard Webhooks signature verified (P4)."""
    return [Webhook(secret).verify(got.body, got.headers) for got in receiver.got]


def test_a_witness_receives_each_checkpoint_exactly_as_published(key: Any, sign: Any, tmp_path: Path) -> None:
    # A4, P4: the body's data is the published document, signed; a witness that keeps what it
    # receives has checkpoints the offline verifier checks as a series.
    with http_receiver() as receiver:
        _hook, secret = witness(receiver)
        first, second = sign(), sign()
        receiver.wait(2)
    bodies = verified(receiver, secret)
    assert [body["type"] for body in bodies] == ["audit.checkpoint", "audit.checkpoint"]
    assert [body["data"] for body in bodies] == [first.document, second.document]
    for body, checkpoint in zip(bodies, (first, second), strict=True):
        published = Path(checkpoint.published_to).read_text(encoding="utf-8")
        assert publication.document_text(body["data"]) == published
    kept = tmp_path / "witness"
    kept.mkdir()
    for body in bodies:
        (kept / publication.file_name(body["data"])).write_text(publication.document_text(body["data"]))
    public = tmp_path / "public.pem"
    public.write_text(signing.public_pem(key.public_key()))
    result = run_verifier(tmp_path, "--key", public, "--checkpoints", kept)
    assert result.returncode == 0, result.stderr
    assert "2 checkpoints" in result.stdout


def test_only_webhooks_that_take_checkpoints_get_them_never_a_persons_channel(
    key: Any, sign: Any, approver: User
) -> None:
    # A4: nothing is owed while no webhook takes checkpoints; then only the witness gets one,
    # not the approvals-only webhook, nor a person's channel even with the event set on it.
    unwatched = sign()
    assert not Fanout.objects.filter(checkpoint=unwatched).exists()
    with http_receiver() as seen, http_receiver() as approvals_only, http_receiver() as persons:
        hook, secret = witness(seen)
        other, _ = services.webhook_create(name="siem", url=approvals_only.url(), actor=OPS)
        assert other.events == [str(event) for event in APPROVAL_EVENTS]  # opt-in, not by default
        mine = services.channel_add(
            owner=approver,
            kind=ChannelKind.APPRISE,
            name="phone",
            target=f"json://{persons.base}/",
            actor=OPS,
        )
        Channel.objects.filter(pk=mine.pk).update(events=[CHECKPOINT])
        checkpoint = sign()
        seen.wait(1)
        approvals_only.wait(1, timeout=0.5)
        persons.wait(1, timeout=0.5)
    assert [body["data"] for body in verified(seen, secret)] == [checkpoint.document]
    assert approvals_only.got == []
    assert persons.got == []
    assert list(Delivery.objects.filter(checkpoint=checkpoint).values_list("channel", flat=True)) == [hook.pk]
    assert not Delivery.objects.filter(checkpoint=unwatched).exists()


def test_a_checkpoint_whose_hint_was_lost_is_sent_once_by_the_sweep(key: Any) -> None:
    # A4: nothing after the signing's commit runs (in this test's transaction `on_commit` work
    # never does), as if the process died: the row owed from that commit makes beat's sweep
    # send it, once however often the sweep runs.
    with http_receiver() as receiver:
        _hook, secret = witness(receiver)
        record_events(2)
        checkpoint = checkpoints.checkpoint_sign()
        assert Fanout.objects.filter(checkpoint=checkpoint, fanned_out_at__isnull=True).count() == 1
        with later(60):
            tasks.sweep.apply().get()
            tasks.sweep.apply().get()
            assert tasks.fan_out.apply(args=[str(checkpoint.pk), CHECKPOINT]).get() == 0
        receiver.wait(2, timeout=1)
    assert [body["data"] for body in verified(receiver, secret)] == [checkpoint.document]
    (delivery,) = Delivery.objects.filter(checkpoint=checkpoint)
    assert (delivery.status, delivery.attempts, delivery.request_id) == (DeliveryStatus.SENT, 1, None)


def test_a_witness_that_fails_is_logged_and_sent_the_checkpoint_again(
    key: Any, sign: Any, operator: User
) -> None:
    # A4, P4: a failed send is in the delivery log and the channel's count of failures; after
    # its back-off the sweep sends it again, with the same webhook-id (the receiver dedupes).
    with http_receiver(answer=500) as receiver:
        hook, secret = witness(receiver)
        checkpoint = sign()
        receiver.wait(1)
        (delivery,) = Delivery.objects.filter(checkpoint=checkpoint)
        assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 1)
        assert delivery.last_error.startswith("The receiver answered 500")
        hook.refresh_from_db()
        assert hook.consecutive_failures == 1
        page = logged_in(operator).get("/notifications/log/").content.decode()
        assert "Audit checkpoint signed" in page
        assert f"Audit checkpoint of {checkpoint.tree_size} events" in page
        assert "The receiver answered 500" in page
        receiver.answer = 200
        with later(3600):
            tasks.sweep.apply().get()
        receiver.wait(2)
    assert [body["data"] for body in verified(receiver, secret)] == [checkpoint.document] * 2
    assert receiver.got[0].headers["webhook-id"] == receiver.got[1].headers["webhook-id"]
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.SENT, 2)
    outcomes = list(delivery.attempt_rows.values_list("outcome", flat=True))
    assert outcomes == [AttemptOutcome.FAILED, AttemptOutcome.SENT]
    hook.refresh_from_db()
    assert hook.consecutive_failures == 0


def test_a_checkpoint_given_up_is_audited_naming_it(key: Any, sign: Any, settings: Any) -> None:
    # A4: never silent: a witness that was not told is in the audit log, naming the checkpoint.
    settings.AIMON_NOTIFY_MAX_ATTEMPTS = 1
    settings.AIMON_NOTIFY_BROKEN_AFTER = 5
    with http_receiver(answer=503) as receiver:
        witness(receiver)
        checkpoint = sign()
        receiver.wait(1)
    (delivery,) = Delivery.objects.filter(checkpoint=checkpoint)
    assert delivery.status == DeliveryStatus.FAILED
    (event,) = AuditEvent.objects.filter(action=AuditAction.NOTIFICATION_GAVE_UP)
    assert event.details["checkpoint_id"] == checkpoint.pk
    assert event.details["event"] == CHECKPOINT
    assert "request_id" not in event.details


def test_operators_choose_checkpoints_on_the_page_and_in_the_config_file(
    operator: User, tmp_path: Path
) -> None:
    # A4: offered with the other events, chosen by nobody by default.
    page = logged_in(operator).get("/notifications/webhooks/").content.decode()
    inputs = {tag for tag in re.findall(r"<input[^>]*>", page) if 'value="CHECKPOINT"' in tag}
    assert len(inputs) == 1
    assert "checked" not in inputs.pop()
    path = tmp_path / "aimon.yaml"
    path.write_text(
        textwrap.dedent("""\
        webhooks:
          witness:
            url: https://93.184.216.34/checkpoints
            events: [audit.checkpoint]
        """),
        encoding="utf-8",
    )
    call_command("load_config", str(path), stdout=io.StringIO())
    assert Channel.objects.get(name="witness").events == [CHECKPOINT]


def test_the_database_keeps_a_checkpoints_message_once_per_channel_and_about_it_alone(
    key: Any, runtime: AgentRuntime
) -> None:
    # A4: a second row for the same checkpoint and channel is refused (a retried fan-out
    # cannot send it twice), and so is one that names a request too, or a request's event.
    with http_receiver() as receiver:
        hook, _secret = witness(receiver)
    record_events(2)
    checkpoint = checkpoints.checkpoint_sign()
    request, _ = request_create(RequestInput(runtime=runtime, skills=["deploy"]))
    now = timezone.now()
    Delivery.objects.create(checkpoint=checkpoint, channel=hook, event=CHECKPOINT, next_attempt_at=now)
    refused = [
        {"checkpoint": checkpoint, "event": CHECKPOINT},
        {"checkpoint": checkpoint, "request": request, "event": CHECKPOINT},
        {"checkpoint": checkpoint, "event": NotificationEvent.REQUESTED},
        {"request": request, "event": CHECKPOINT},
        {"event": CHECKPOINT},
    ]
    for fields in refused:
        with pytest.raises(IntegrityError), transaction.atomic():
            Delivery.objects.create(channel=hook, next_attempt_at=now, **fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        Fanout.objects.create(checkpoint=checkpoint, request=request, event=CHECKPOINT)
