"""Where signed checkpoints are published outside the database (A4): a directory.

AIMON_AUDIT_CHECKPOINT_DIR (setting and environment variable; by default audit-checkpoints/
beside the embedded database) receives, for each checkpoint, `checkpoint-<time>-<size>.json`
(never rewritten), `latest.json` (the newest, replaced), and `public-key-<key id>.pem` for
each signing key. Each file is written whole to a temporary name and renamed, so a reader
never sees half of one. Put the directory on storage the database's owner cannot rewrite,
or copy it elsewhere (rsync, an object store's sync): a copy kept elsewhere is what makes a
cut-off tail visible.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from django.conf import settings

from aimon_admin.audit import chain

LATEST = "latest.json"


class PublishedUnreadableError(Exception):
    """The newest published checkpoint is there but cannot be read."""


def directory() -> Path:
    return Path(str(settings.AIMON_AUDIT_CHECKPOINT_DIR))


def file_name(document: dict[str, Any]) -> str:
    stamp = document["time"].replace("-", "").replace(":", "").replace("+0000", "Z").replace("+00:00", "Z")
    return f"checkpoint-{stamp}-{document['tree_size']:012d}.json"


def document_text(document: dict[str, Any]) -> str:
    """A checkpoint as published: canonical JSON and a newline."""
    return chain.canonical_json(document) + "\n"


def _write(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def publish(document: dict[str, Any], public_pem: str) -> str:
    """Write one checkpoint; return where it went. OSError when it could not be written."""
    target = directory()
    target.mkdir(parents=True, exist_ok=True)
    key_file = target / f"public-key-{document['key_id']}.pem"
    if not key_file.exists():
        _write(key_file, public_pem)
    path = target / file_name(document)
    _write(path, document_text(document))
    _write(target / LATEST, document_text(document))
    return str(path)


def read_latest() -> dict[str, Any] | None:
    """The newest published checkpoint, None when nothing was published yet."""
    path = directory() / LATEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PublishedUnreadableError(f"{path} cannot be read: {exc}") from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PublishedUnreadableError(f"{path} is not a checkpoint (not JSON: {exc})") from exc
    if not isinstance(document, dict) or not {"tree_size", "root_hash", "log_id"} <= set(document):
        raise PublishedUnreadableError(f"{path} is not a checkpoint")
    return document
