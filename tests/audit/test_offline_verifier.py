"""The offline verifier against a real proved export and real signed checkpoints (A4).

The log: 6 events, checkpoint A (the auditor keeps it), 6 more, checkpoint B, and the export
of all 12 that ends at B. Each row of the tamper table changes the export (or a checkpoint) as
someone who can rewrite files or the database would, and the verifier, run as its own process
with Django made unimportable, must fail naming what and where. The verifier needs only the
public key.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cryptography
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings

from aimon_admin.audit import chain, checkpoints, proofs, signing
from aimon_admin.audit.models import AuditCheckpoint
from aimon_admin.audit.rotation import key_rotate
from tests.audit.helpers import record_events
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db

VERIFIER = Path(settings.BASE_DIR) / "clients" / "verifier" / "aimon_verify_audit.py"


def run_verifier(
    tmp_path: Path, *args: str | Path, script: Path = VERIFIER
) -> subprocess.CompletedProcess[str]:
    """The verifier (or `script`) in a process of its own whose import path holds the standard library and
    `cryptography` (with the cffi it loads) and nothing else: no Django, nothing of the product."""
    isolated = tmp_path / "only-cryptography"
    if not isolated.exists():
        isolated.mkdir()
        site = Path(cryptography.__file__).resolve().parent.parent
        for name in ("cryptography", "cffi", *(p.name for p in site.glob("_cffi_backend*"))):
            (isolated / name).symlink_to(site / name)
    return subprocess.run(
        [sys.executable, "-S", str(script), *map(str, args)],  # -S: no site-packages
        env={"PYTHONPATH": str(isolated), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_verifier_cannot_import_django_where_it_runs(tmp_path: Path) -> None:  # A4
    probe = tmp_path / "probe.py"
    probe.write_text("import cryptography\ntry:\n    import django\nexcept ImportError:\n    print('none')\n")
    assert run_verifier(tmp_path, script=probe).stdout == "none\n"


@dataclass
class Log:
    tmp: Path
    key: Ed25519PrivateKey
    public: Path
    older: AuditCheckpoint
    newer: AuditCheckpoint

    def write(self, name: str, text: str) -> Path:
        path = self.tmp / name
        path.write_text(text, encoding="utf-8")
        return path

    def checkpoint_file(self, name: str, document: dict[str, Any]) -> Path:
        return self.write(name, json.dumps(document))

    def export_lines(self, checkpoint: AuditCheckpoint | None = None) -> list[str]:
        checkpoint = checkpoint or self.newer
        span = proofs.span_for(checkpoint, None, None, False)
        return "".join(proofs.chunks(checkpoint, span)).splitlines(keepends=True)

    def verify(self, lines: list[str], *extra: str | Path) -> subprocess.CompletedProcess[str]:
        export = self.write("export.jsonl", "".join(lines))
        return run_verifier(self.tmp, "--key", self.public, export, *extra)


@pytest.fixture
def signing_key(settings: Any, tmp_path: Path) -> tuple[Ed25519PrivateKey, Path]:
    path = tmp_path / "signing-key.pem"
    key = signing.create_key(path)
    settings.AIMON_AUDIT_SIGNING_KEY = str(path)
    settings.AIMON_AUDIT_CHECKPOINT_DIR = str(tmp_path / "published")
    public = tmp_path / "public.pem"
    public.write_text(signing.public_pem(key.public_key()))
    checkpoints.refusal_forget()
    return key, public


@pytest.fixture
def log(signing_key: tuple[Ed25519PrivateKey, Path], tmp_path: Path) -> Log:
    record_events(6)
    older = checkpoints.checkpoint_sign()
    record_events(6, prefix="later")
    newer = checkpoints.checkpoint_sign()
    assert (older.tree_size, newer.tree_size) == (6, 12)
    return Log(tmp_path, signing_key[0], signing_key[1], older, newer)


def resign(document: dict[str, Any], key: Ed25519PrivateKey, **changes: Any) -> dict[str, Any]:
    """A checkpoint changed and signed again (with the real key, or another)."""
    forged = {**document, **changes}
    forged["key_id"] = signing.key_id(key.public_key())
    forged["signature"] = base64.b64encode(key.sign(checkpoints.signed_message(forged))).decode()
    return forged


def swap_header(lines: list[str], document: dict[str, Any]) -> list[str]:
    return [json.dumps({"aimon_audit_export": 1, "checkpoint": document}) + "\n", *lines[1:]]


def edit_event(lines: list[str], seq: int, rechain: bool = False, **changes: Any) -> list[str]:
    out, prev = list(lines), None
    for index in range(1, len(out)):
        record = json.loads(out[index])
        if record["seq"] < seq:
            prev = record["hash"]
            continue
        if record["seq"] > seq and not rechain:
            break
        if record["seq"] == seq:
            record.update(changes)
        if rechain:
            record["prev_hash"] = prev
            record["hash"] = chain.compute_hash({k: v for k, v in record.items() if k != "hash"})
            prev = record["hash"]
        out[index] = json.dumps(record) + "\n"
    return out


def test_an_untouched_export_verifies_with_the_older_checkpoint(log: Log) -> None:  # A4
    older = log.checkpoint_file("older.json", log.older.document)
    result = log.verify(log.export_lines(), "--checkpoint", older)
    assert result.returncode == 0, result.stderr
    assert "12 events (whole log) verified" in result.stdout
    assert "1 older checkpoints extended" in result.stdout


# Each row: what was done, how, extra arguments, the failure the verifier must name.
Tamper = Callable[[Log, list[str]], tuple[list[str], list[str | Path]]]
TAMPER_TABLE: list[tuple[str, Tamper, str]] = [
    (
        "tail cut",
        lambda log, lines: (lines[:9], []),
        r"the export ends at seq 8 but its checkpoint signed 12 events: events 9\.\.12 are missing",
    ),
    (
        "tail cut, ending at an older checkpoint than the one kept",
        lambda log, lines: (
            log.export_lines(log.older),
            ["--checkpoint", log.checkpoint_file("kept.json", log.newer.document)],
        ),
        r"missing tail: .*kept\.json \(size 12.* covers 12 events, the export ends at 6: events 7\.\.12",
    ),
    (
        "middle event removed",
        lambda log, lines: ([*lines[:5], *lines[6:]], []),
        r"line 6 \(seq 6\): expected seq 5: event 5 is missing",
    ),
    (
        "pair reordered",
        lambda log, lines: ([*lines[:7], lines[8], lines[7], *lines[9:]], []),
        r"line 8 \(seq 8\): expected seq 7: event 7 is missing or out of order",
    ),
    (
        "field edited",
        lambda log, lines: (edit_event(lines, 9, actor_label="mallory"), []),
        r"line 10 \(seq 9\): the hash does not match its content: the event was altered",
    ),
    (
        "field edited and every hash after it recomputed",
        lambda log, lines: (edit_event(lines, 9, rechain=True, actor_label="mallory"), []),
        r"the events do not rebuild the signed root",
    ),
    (
        "edited before the older checkpoint, rechained",
        lambda log, lines: (
            edit_event(lines, 3, rechain=True, subject="rewritten"),
            ["--checkpoint", log.checkpoint_file("older.json", log.older.document)],
        ),
        r"older\.json \(size 6.*: the export's first 6 events are not the ones it signed",
    ),
    (
        "forged checkpoint (root changed)",
        lambda log, lines: (swap_header(lines, {**log.newer.document, "root_hash": "ab" * 32}), []),
        r"the export's checkpoint: the signature does not verify with key [0-9a-f]{16}: forged or edited",
    ),
    (
        "checkpoint signed by another key",
        lambda log, lines: (swap_header(lines, resign(log.newer.document, Ed25519PrivateKey.generate())), []),
        r"the export's checkpoint: signed with key '[0-9a-f]{16}', which is not one of the keys given",
    ),
    (
        "older checkpoint edited by hand",
        lambda log, lines: (
            lines,
            ["--checkpoint", log.checkpoint_file("older.json", {**log.older.document, "tree_size": 5})],
        ),
        r"older\.json: the signature does not verify",
    ),
    (
        "older checkpoint of another log",
        lambda log, lines: (
            lines,
            [
                "--checkpoint",
                log.checkpoint_file("other.json", resign(log.older.document, log.key, log_id="cd" * 32)),
            ],
        ),
        r"other\.json is for another log",
    ),
    (
        "export cut in the middle of a line",
        lambda log, lines: ([*lines[:-1], lines[-1][:40]], []),
        r"line 13: not JSON, the export is cut or damaged",
    ),
    (
        "signed with a clock far in the past",
        lambda log, lines: (
            swap_header(lines, resign(log.newer.document, log.key, time="2001-01-01T00:00:00.000000+00:00")),
            [],
        ),
        r"line 2 \(seq 1\): written at .*, after its checkpoint was signed \(2001-01-01",
    ),
]


@pytest.mark.parametrize(
    ("tamper", "message"), [(t, m) for _, t, m in TAMPER_TABLE], ids=[n for n, _, _ in TAMPER_TABLE]
)
def test_tampering_fails_naming_what_and_where(log: Log, tamper: Tamper, message: str) -> None:  # A4
    lines, extra = tamper(log, log.export_lines())
    result = log.verify(lines, *extra)
    assert result.returncode == 1, result.stdout
    assert result.stderr.startswith("FAILED: ")
    assert re.search(message, result.stderr), result.stderr


def test_a_rotated_key_is_learnt_from_the_log_and_an_unannounced_one_refused(
    log: Log, settings: Any, tmp_path: Path
) -> None:  # A4: a rotated key is announced in the log, signed by the old one
    key_rotate(new_path=tmp_path / "new-key.pem", actor=TEST_ACTOR)
    settings.AIMON_AUDIT_SIGNING_KEY = str(tmp_path / "new-key.pem")
    record_events(2, prefix="after-rotation")
    rotated = checkpoints.checkpoint_sign()
    assert rotated.key_id != log.newer.key_id
    older = log.checkpoint_file("older.json", log.older.document)
    result = log.verify(log.export_lines(rotated), "--checkpoint", older)
    assert result.returncode == 0, result.stderr  # only the old public key was given

    signing.create_key(tmp_path / "unannounced.pem")
    settings.AIMON_AUDIT_SIGNING_KEY = str(tmp_path / "unannounced.pem")
    record_events(1, prefix="after-swap")
    swapped = checkpoints.checkpoint_sign()
    result = log.verify(log.export_lines(swapped), "--checkpoint", older)
    assert result.returncode == 1
    assert "which is not one of the keys given" in result.stderr


def test_one_event_proof_verifies_and_a_wrong_proof_is_named(log: Log) -> None:  # A4
    bundle = proofs.event_proof(5).splitlines(keepends=True)
    assert len(bundle) == 2
    assert log.verify(bundle).returncode == 0
    record = json.loads(bundle[1])
    record["inclusion"][0] = "00" * 32
    result = log.verify([bundle[0], json.dumps(record) + "\n"])
    assert result.returncode == 1
    assert "line 2 (seq 5): not included in the tree its checkpoint signed" in result.stderr


def test_the_published_checkpoints_verify_as_a_series(log: Log) -> None:  # A4
    published = Path(settings.AIMON_AUDIT_CHECKPOINT_DIR)
    result = run_verifier(log.tmp, "--key", log.public, "--checkpoints", published)
    assert result.returncode == 0, result.stderr
    assert "2 checkpoints" in result.stdout

    first = sorted(published.glob("checkpoint-*.json"))[0]
    first.write_text(first.read_text().replace('"tree_size":6', '"tree_size":7'))
    result = run_verifier(log.tmp, "--key", log.public, "--checkpoints", published)
    assert result.returncode == 1
    assert f"{first}: the signature does not verify" in result.stderr


def test_a_wrong_command_line_exits_2(tmp_path: Path) -> None:  # A4
    result = run_verifier(tmp_path, "--key", tmp_path / "none.pem")
    assert result.returncode == 2
