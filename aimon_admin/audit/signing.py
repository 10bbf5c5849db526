"""The key that signs the audit log's checkpoints (A4): Ed25519, in a file outside the database.

The file is named by the AIMON_AUDIT_SIGNING_KEY environment variable (setting of the same
name) and created by `manage.py audit_key create PATH` (PKCS#8 PEM, readable by its owner
only). Its public half is what auditors verify with: the auditor's checkpoint page shows it,
and every publication directory holds a copy. A key id is the first 16 hex digits of the
SHA-256 of the raw public key.

Every failure to load the key is a `SigningKeyError` whose text says what to do: signing
never stops without saying why (aimon_admin.audit.checkpoints shows it on the auditor's home).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)
from django.conf import settings

ENV_VAR = "AIMON_AUDIT_SIGNING_KEY"
# Words people see (tests import these).
NO_KEY = (
    "No signing key: AIMON_AUDIT_SIGNING_KEY names no file, so no checkpoint is signed. "
    "Create one with `manage.py audit_key create /etc/aimon/audit-key.pem` and set "
    "AIMON_AUDIT_SIGNING_KEY to that file."
)
KEY_MISSING = (
    "The signing key file {path} (AIMON_AUDIT_SIGNING_KEY) does not exist, so no checkpoint is "
    "signed. Restore it from its backup, or create a new one with `manage.py audit_key create` "
    "and announce it with `manage.py audit_key rotate`."
)
KEY_UNREADABLE = "The signing key file {path} (AIMON_AUDIT_SIGNING_KEY) cannot be used: {problem}."


class SigningKeyError(Exception):
    """The signing key cannot be used; the text says why and what to do."""


def key_path() -> Path | None:
    value = str(getattr(settings, "AIMON_AUDIT_SIGNING_KEY", "") or "").strip()
    return Path(value) if value else None


def read_private_key(path: Path) -> Ed25519PrivateKey:
    if not path.exists():
        raise SigningKeyError(KEY_MISSING.format(path=path))
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise SigningKeyError(KEY_UNREADABLE.format(path=path, problem=exc)) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(KEY_UNREADABLE.format(path=path, problem="not an Ed25519 private key"))
    return key


def signing_key() -> Ed25519PrivateKey:
    """The configured key, or SigningKeyError saying why there is none."""
    path = key_path()
    if path is None:
        raise SigningKeyError(NO_KEY)
    return read_private_key(path)


def create_key(path: Path) -> Ed25519PrivateKey:
    """Write a new key to `path` (owner-only), refusing to replace a file that is there."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(pem)
    return key


def key_id(public: Ed25519PublicKey) -> str:
    return hashlib.sha256(public.public_bytes(Encoding.Raw, PublicFormat.Raw)).hexdigest()[:16]


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
