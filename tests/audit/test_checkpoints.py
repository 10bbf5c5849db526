"""Signed checkpoints (A4): what is signed and published, and every refusal said in words."""

from __future__ import annotations

import base64
import datetime as dt
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError

from aimon_admin.audit import checkpoints, merkle, signing, tasks, tree
from aimon_admin.audit.models import AuditCheckpoint
from tests.audit.helpers import execute, record_events

pytestmark = pytest.mark.django_db


@pytest.fixture
def key(settings: Any, tmp_path: Path) -> Any:
    path = tmp_path / "key.pem"
    created = signing.create_key(path)
    settings.AIMON_AUDIT_SIGNING_KEY = str(path)
    settings.AIMON_AUDIT_CHECKPOINT_DIR = str(tmp_path / "published")
    checkpoints.refusal_forget()
    yield created
    checkpoints.refusal_forget()


def test_a_checkpoint_is_signed_chained_and_published(key: Any, tmp_path: Path) -> None:  # A4
    record_events(3)
    first = checkpoints.checkpoint_sign()
    record_events(4)
    second = checkpoints.checkpoint_sign()
    doc = second.document
    assert (doc["tree_size"], doc["previous"]) == (7, first.checkpoint_hash)
    assert doc["root_hash"] == tree.root(7).hex()
    assert doc["key_id"] == signing.key_id(key.public_key())
    key.public_key().verify(base64.b64decode(doc["signature"]), checkpoints.signed_message(doc))
    proof = [bytes.fromhex(h) for h in doc["consistency"]]
    assert merkle.verify_consistency(3, 7, bytes.fromhex(first.root_hash), tree.root(7), proof)

    published = tmp_path / "published"
    assert Path(second.published_to).parent == published
    assert json.loads(Path(second.published_to).read_text()) == doc
    assert json.loads((published / "latest.json").read_text()) == doc
    assert (published / f"public-key-{doc['key_id']}.pem").read_text() == signing.public_pem(key.public_key())
    assert len(list(published.glob("checkpoint-*.json"))) == 2


def test_without_a_key_it_refuses_and_says_so(settings: Any, tmp_path: Path) -> None:  # A4
    settings.AIMON_AUDIT_SIGNING_KEY = ""
    settings.AIMON_AUDIT_CHECKPOINT_DIR = str(tmp_path / "published")
    record_events(2)
    assert tasks.sign_checkpoint.apply().get() is None
    refusal = checkpoints.refusal()
    assert refusal is not None
    assert refusal.reason == signing.NO_KEY
    assert checkpoints.signing_status().problems[0] == signing.NO_KEY

    settings.AIMON_AUDIT_SIGNING_KEY = str(tmp_path / "gone.pem")
    with pytest.raises(checkpoints.CheckpointRefusedError, match=r"gone\.pem .* does not exist"):
        checkpoints.checkpoint_sign()
    assert not AuditCheckpoint.objects.exists()
    checkpoints.refusal_forget()


def test_an_empty_log_is_not_signed(key: Any) -> None:  # A4
    with pytest.raises(checkpoints.CheckpointRefusedError, match=checkpoints.EMPTY_LOG):
        checkpoints.checkpoint_sign()


def _cut_tail(from_seq: int, *, tree_too: bool, checkpoints_too: bool) -> None:
    execute("DELETE FROM audit_auditevent WHERE seq >= %s", [from_seq])
    if tree_too:
        execute(
            "DELETE FROM audit_audittreenode WHERE position * (1 << level) + (1 << level) > %s",
            [from_seq - 1],
        )
    if checkpoints_too:
        execute("DELETE FROM audit_auditcheckpoint")


@pytest.mark.parametrize(
    ("tree_too", "checkpoints_too", "message"),
    [
        (False, False, r"The tree holds an event past the log's newest \(seq 9\)"),
        (
            True,
            False,
            r"fewer than the 12 the (previous|newest published) checkpoint .* events 10\.\.12 were removed",
        ),
        (True, True, r"fewer than the 12 the newest published checkpoint .* events 10\.\.12 were removed"),
    ],
    ids=["events-cut", "events-and-tree-cut", "events-tree-and-checkpoints-cut"],
)
def test_a_cut_tail_is_refused(
    key: Any, triggers_dropped: None, tree_too: bool, checkpoints_too: bool, message: str
) -> None:  # A4: a review once cut every event after the 59th; here after the 9th
    record_events(12)
    checkpoints.checkpoint_sign()
    _cut_tail(10, tree_too=tree_too, checkpoints_too=checkpoints_too)
    with pytest.raises(checkpoints.CheckpointRefusedError, match=message):
        checkpoints.checkpoint_sign()
    assert checkpoints.refusal() is not None
    assert checkpoints.signing_status().problems


def test_a_rewritten_newest_event_is_refused(key: Any, triggers_dropped: None) -> None:  # A4
    record_events(5)
    execute("UPDATE audit_auditevent SET subject = 'rewritten' WHERE seq = 5")
    with pytest.raises(checkpoints.CheckpointRefusedError, match=r"newest event \(seq 5\) is not the one"):
        checkpoints.checkpoint_sign()


def test_a_clock_gone_back_is_refused(key: Any) -> None:  # A4
    record_events(2)
    checkpoints.checkpoint_sign()
    past = dt.datetime(2001, 1, 1, tzinfo=dt.UTC)
    with pytest.raises(checkpoints.CheckpointRefusedError, match="clock reads 2001-01-01"):
        checkpoints.checkpoint_sign(now=past)


def test_a_publication_that_fails_is_kept_and_shown(key: Any, settings: Any, tmp_path: Path) -> None:  # A4
    published = tmp_path / "published"
    (published / ".latest.json.tmp").mkdir(parents=True)  # latest.json cannot be written
    record_events(1)
    checkpoint = checkpoints.checkpoint_sign()
    assert checkpoint.published_to == ""
    assert checkpoint.publish_problem.startswith(f"Signed, but could not be written to {published}")
    assert checkpoint.publish_problem in checkpoints.signing_status().problems


def test_a_publication_that_cannot_be_read_refuses(key: Any, settings: Any, tmp_path: Path) -> None:  # A4
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    settings.AIMON_AUDIT_CHECKPOINT_DIR = str(blocked)
    record_events(1)
    with pytest.raises(checkpoints.CheckpointRefusedError, match=r"latest\.json cannot be read"):
        checkpoints.checkpoint_sign()
    (tmp_path / "published").mkdir()
    (tmp_path / "published" / "latest.json").write_text("{edited by hand")
    settings.AIMON_AUDIT_CHECKPOINT_DIR = str(tmp_path / "published")
    with pytest.raises(checkpoints.CheckpointRefusedError, match=r"latest\.json is not a checkpoint"):
        checkpoints.checkpoint_sign()


def test_an_old_checkpoint_is_overdue(key: Any) -> None:  # A4: signing never stops unseen
    record_events(1)
    checkpoint = checkpoints.checkpoint_sign()
    later = checkpoint.signed_at + 3 * checkpoints.interval()
    assert checkpoints.due(later)
    assert any("overdue" in problem for problem in checkpoints.signing_status(now=later).problems)
    assert checkpoints.signing_status().problems == []


def test_the_beat_signs_every_interval() -> None:  # A4
    entry = django_settings.CELERY_BEAT_SCHEDULE["audit-sign-checkpoint"]
    assert entry["task"] == tasks.SIGN_TASK_NAME
    assert entry["schedule"] == 60.0 * django_settings.AIMON_AUDIT_CHECKPOINT_MINUTES


def test_the_commands_create_show_and_sign(settings: Any, tmp_path: Path) -> None:  # A4
    path = tmp_path / "cmd-key.pem"
    out = StringIO()
    call_command("audit_key", "create", str(path), stdout=out)
    assert "BEGIN PUBLIC KEY" in out.getvalue()
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(CommandError, match="exists already"):
        call_command("audit_key", "create", str(path), stdout=StringIO())
    call_command("audit_key", "create", str(path), "--if-missing", stdout=StringIO())

    settings.AIMON_AUDIT_SIGNING_KEY = str(path)
    settings.AIMON_AUDIT_CHECKPOINT_DIR = str(tmp_path / "published")
    shown = StringIO()
    call_command("audit_key", "show", stdout=shown)
    assert f"key id {signing.key_id(signing.signing_key().public_key())}" in shown.getvalue()
    with pytest.raises(CommandError, match="no checkpoint signed: " + checkpoints.EMPTY_LOG):
        call_command("audit_checkpoint", stdout=StringIO())
    record_events(2)
    signed = StringIO()
    call_command("audit_checkpoint", stdout=signed)
    assert "checkpoint of 2 events signed" in signed.getvalue()
    checkpoints.refusal_forget()


def test_make_run_makes_the_demo_key_the_demo_settings_name() -> None:  # A4
    text = (Path(django_settings.BASE_DIR) / "Makefile").read_text()
    recipe = text.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    line = next(step for step in recipe.splitlines() if "audit_key create" in step)
    assert "--if-missing" in line
    assert recipe.index("audit_key create") < recipe.index("uvicorn")
    assert ".demo-audit-signing-key.pem" in line


@pytest.mark.parametrize("checkpoints_too", [False, True], ids=["database-copy", "published-copy"])
def test_verify_audit_sees_a_tail_cut_after_a_signed_checkpoint(
    key: Any, triggers_dropped: None, checkpoints_too: bool
) -> None:  # A2, A4: the chain alone printed "OK: 59 events" after everything past 59 was cut
    record_events(12)
    checkpoints.checkpoint_sign()
    _cut_tail(10, tree_too=True, checkpoints_too=checkpoints_too)
    which = "newest published"
    for arguments in ([], ["--from-checkpoint"]):
        with pytest.raises(
            CommandError, match=rf"seq=10: missing: the {which} checkpoint .* covers 12 events"
        ):
            call_command("verify_audit", *arguments, stdout=StringIO())
