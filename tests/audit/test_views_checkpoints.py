"""The auditor's checkpoint page, Sign now, the proved export and Download proof (A4)."""

from __future__ import annotations

import html
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.http import StreamingHttpResponse
from django.test import Client
from django.urls import reverse

from aimon_admin.audit import checkpoints, proofs, signing
from aimon_admin.audit.models import AuditCheckpoint, AuditEvent
from aimon_admin.audit.proof_views import NOT_A_NUMBER, SIGNED_MESSAGE, UNCHANGED_MESSAGE
from tests.audit.helpers import record_events

pytestmark = pytest.mark.django_db

_spec = importlib.util.spec_from_file_location(
    "aimon_verify_audit",
    Path(__file__).resolve().parents[2] / "clients" / "verifier" / "aimon_verify_audit.py",
)
verifier = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(verifier)  # type: ignore[union-attr]


@pytest.fixture
def no_key(settings: Any, tmp_path: Path) -> None:
    settings.AIMON_AUDIT_SIGNING_KEY = ""
    settings.AIMON_AUDIT_CHECKPOINT_DIR = str(tmp_path / "published")
    checkpoints.refusal_forget()


@pytest.fixture
def key(settings: Any, tmp_path: Path) -> Any:
    created = signing.create_key(tmp_path / "key.pem")
    settings.AIMON_AUDIT_SIGNING_KEY = str(tmp_path / "key.pem")
    settings.AIMON_AUDIT_CHECKPOINT_DIR = str(tmp_path / "published")
    settings.CELERY_TASK_ALWAYS_EAGER = True
    checkpoints.refusal_forget()
    yield created
    checkpoints.refusal_forget()


@pytest.fixture
def auditor_client(auditor: Any) -> Client:
    client = Client()
    client.force_login(auditor)
    return client


def body(response: Any) -> str:
    if isinstance(response, StreamingHttpResponse):

        async def read() -> list[bytes]:
            return [chunk async for chunk in response.streaming_content]  # type: ignore[union-attr]

        return b"".join(async_to_sync(read)()).decode()
    return response.content.decode()


def head() -> int:
    """The newest seq (signing people in writes events too)."""
    return AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0


def verify_text(tmp_path: Path, key: Any, text: str) -> str:
    path = tmp_path / "download.jsonl"
    path.write_text(text)
    keys = {verifier.key_id(key.public_key()): key.public_key()}
    return verifier.verify_export(path, keys, [])


def test_without_a_key_the_pages_say_why_nothing_is_signed(
    no_key: None, auditor_client: Client
) -> None:  # A4
    record_events(2)
    page = auditor_client.get(reverse("audit:checkpoints"))
    assert page.status_code == 200
    assert signing.NO_KEY.split(":")[0] in page.content.decode()
    assert "Sign now" in page.content.decode()
    home = auditor_client.get(reverse("audit:home")).content.decode()
    assert 'data-testid="checkpoint-card"' in home
    assert "No signing key" in home
    core_home = auditor_client.get(reverse("core:home")).content.decode()
    assert "Signed checkpoints" in core_home
    assert "No signing key" in core_home

    refused = auditor_client.post(reverse("audit:checkpoint-sign"), follow=True)
    assert "No checkpoint signed: No signing key" in refused.content.decode()
    assert not AuditCheckpoint.objects.exists()
    proof = auditor_client.get(reverse("audit:event-proof", args=[1]))
    assert proof.status_code == 409
    assert "No checkpoint is signed yet" in proof.content.decode()
    assert auditor_client.get(reverse("audit:checkpoint-export")).status_code == 400


def test_the_page_signs_what_is_owed_under_make_run_and_shows_it(
    key: Any, auditor_client: Client
) -> None:  # A4
    record_events(3)
    page = auditor_client.get(reverse("audit:checkpoints")).content.decode()
    newest = checkpoints.newest()
    assert newest is not None
    assert newest.tree_size == head()
    assert newest.root_hash in page
    assert signing.public_pem(key.public_key()).splitlines()[1] in page
    assert "Signing is not keeping up" not in page
    core_home = auditor_client.get(reverse("core:home")).content.decode()
    assert "Signed checkpoints" not in core_home  # nothing to say while it keeps up

    record_events(2)
    response = auditor_client.post(reverse("audit:checkpoint-sign"), follow=True)
    assert f"Checkpoint of {head()} events signed and published." in response.content.decode()
    assert AuditCheckpoint.objects.count() == 2


def test_sign_now_says_when_the_log_is_unchanged_or_not_published_everywhere(
    key: Any, auditor_client: Client, tmp_path: Path
) -> None:  # A4
    record_events(2)
    first = auditor_client.post(reverse("audit:checkpoint-sign"), follow=True).content.decode()
    assert SIGNED_MESSAGE.format(size=head()) in first
    previous = checkpoints.newest()
    assert previous is not None
    again = auditor_client.post(reverse("audit:checkpoint-sign"), follow=True).content.decode()
    time = previous.signed_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert html.escape(UNCHANGED_MESSAGE.format(size=head(), time=time)) in again
    assert AuditCheckpoint.objects.count() == 2

    (tmp_path / "published" / ".latest.json.tmp").mkdir()  # latest.json cannot be written
    record_events(1)
    failed = auditor_client.post(reverse("audit:checkpoint-sign"), follow=True).content.decode()
    assert (
        f"Checkpoint of {head()} events signed, but not published everywhere: Signed, but could not" in failed
    )
    assert SIGNED_MESSAGE.format(size=head()) not in failed


def test_the_proved_export_and_one_events_proof_verify_offline(
    key: Any, auditor_client: Client, tmp_path: Path
) -> None:  # A4
    record_events(7)
    whole = auditor_client.get(reverse("audit:checkpoint-export"))
    assert whole.status_code == 200
    text = body(whole)
    assert json.loads(text.splitlines()[0])["checkpoint"]["tree_size"] == head()
    assert f"{head()} events (whole log)" in verify_text(tmp_path, key, text)

    part = body(auditor_client.get(reverse("audit:checkpoint-export"), {"first": 3, "last": 5}))
    assert [json.loads(line)["seq"] for line in part.splitlines()[1:]] == [3, 4, 5]
    assert "3 inclusion proofs" in verify_text(tmp_path, key, part)

    proof = auditor_client.get(reverse("audit:event-proof", args=[4]))
    assert proof["Content-Disposition"] == 'attachment; filename="audit-event-4-proof.jsonl"'
    assert "1 inclusion proofs" in verify_text(tmp_path, key, body(proof))
    event_page = auditor_client.get(reverse("audit:event", args=[4])).content.decode()
    assert reverse("audit:event-proof", args=[4]) in event_page


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"first": "abc"}, NOT_A_NUMBER.format(name="first")),
        ({"first": 5, "last": 2}, "Choose events from 1 to "),
        ({"last": 99}, "Choose events from 1 to "),
    ],
)
def test_a_proved_export_that_cannot_be_read_is_refused_naming_it(
    key: Any, auditor_client: Client, query: dict[str, Any], message: str
) -> None:  # A4
    record_events(3)
    response = auditor_client.get(reverse("audit:checkpoint-export"), query)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_approvers_see_none_of_it(key: Any, approver: Any) -> None:  # A4: auditors and operators only
    record_events(1)
    client = Client()
    client.force_login(approver)
    for name, args in (
        ("audit:checkpoints", []),
        ("audit:checkpoint-export", []),
        ("audit:event-proof", [1]),
    ):
        assert client.get(reverse(name, args=args)).status_code == 403
    assert client.post(reverse("audit:checkpoint-sign")).status_code == 403
    assert not AuditCheckpoint.objects.exists()
    assert proofs.MAX_PROVED_EVENTS == 10_000
