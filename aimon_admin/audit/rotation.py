"""Rotating the checkpoint signing key (A4): the new key is announced in the log itself,
signed by the old one.

`key_rotate` writes a new key file and an AUDIT_SIGNING_KEY_ROTATED event whose details hold
the old and new key ids, the new public key (PEM) and the old key's Ed25519 signature over

    "aimon-audit-key-rotation/1\\n" + canonical JSON of {old_key_id, new_key_id, new_public_key}

so whoever trusts the old key learns the new one from an export, and the offline verifier
(clients/verifier/aimon_verify_audit.py) accepts checkpoints signed by either. The operator then
points AIMON_AUDIT_SIGNING_KEY at the new file; the next checkpoint is signed with it.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.db import transaction

from aimon_admin.audit import chain, signing
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core import encryption
from aimon_admin.core.actors import Actor

ROTATION_FORMAT = "aimon-audit-key-rotation/1"
ANNOUNCED_FIELDS = ("old_key_id", "new_key_id", "new_public_key")


def rotation_message(details: dict[str, Any]) -> bytes:
    announced = {field: details[field] for field in ANNOUNCED_FIELDS}
    return ROTATION_FORMAT.encode() + b"\n" + chain.canonical_json(announced).encode()


def key_rotate(*, new_path: Path, actor: Actor) -> Ed25519PrivateKey:
    """Create the new key at `new_path` and announce it, signed by the configured (old) key."""
    old = signing.signing_key()
    if new_path.exists():
        raise signing.SigningKeyError(f"{new_path} exists already: the new key needs a new file")
    new = signing.create_key(new_path)
    details: dict[str, Any] = {
        "old_key_id": signing.key_id(old.public_key()),
        "new_key_id": signing.key_id(new.public_key()),
        "new_public_key": signing.public_pem(new.public_key()),
    }
    details["signature"] = base64.b64encode(old.sign(rotation_message(details))).decode()
    with transaction.atomic():
        audit_record(
            action=AuditAction.AUDIT_SIGNING_KEY_ROTATED,
            actor=actor,
            level=AuditLevel.WARNING,
            subject_type="audit_key",
            subject=details["new_key_id"],
            details=details,
        )
    return new


def secrets_reencrypt(*, actor: Actor, batch: int = encryption.BATCH) -> dict[str, dict[str, int]]:
    """Key rotation for stored secrets (core.encryption): re-encrypt every one not yet under
    the newest key, in batches that each commit, then one event with the counts per field
    (never a value). Run again after an interruption: what was done comes back as current.
    Values no configured key opens are counted, left as they are, and make the event a
    warning (dropping a key then would lose nothing more, but they need a key or new values)."""
    counts = encryption.reencrypt_all(batch=batch)
    unreadable = sum(figures[encryption.UNREADABLE] for figures in counts.values())
    audit_record(
        action=AuditAction.SECRETS_REENCRYPTED,
        actor=actor,
        level=AuditLevel.WARNING if unreadable else AuditLevel.INFO,
        subject_type="secrets_key",
        subject=encryption.key_id(encryption.configured_keys()[0]),
        details={"keys_configured": len(encryption.configured_keys()), "batch": batch, "fields": counts},
    )
    return counts
