"""Where signed checkpoints are published outside the database (A4): a directory, and an
S3-compatible bucket when one is named.

AIMON_AUDIT_CHECKPOINT_DIR (setting and environment variable; by default audit-checkpoints/
beside the embedded database) receives, for each checkpoint, `checkpoint-<time>-<size>.json`
(never rewritten), `latest.json` (the newest, replaced), and `public-key-<key id>.pem` for
each signing key. Each file is written whole to a temporary name and renamed, so a reader
never sees half of one. Put the directory on storage the database's owner cannot rewrite,
or copy it elsewhere (rsync, an object store's sync): a copy kept elsewhere is what makes a
cut-off tail visible.

AIMON_AUDIT_CHECKPOINT_S3_URL (s3://BUCKET or s3://BUCKET/PREFIX) adds a bucket, on AWS or
on the server AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT names: the same objects under the prefix,
with the same names and bytes. A checkpoint's object and a key's are put only where there is
none (a look first, then a conditional put, If-None-Match: *, where the server supports it):
one there already is never replaced. Checkpoints the bucket missed (an outage) are copied
from the directory with the next one. Credentials come from boto3's own chain, never from
the settings. Every call is short (CLIENT_CONFIG), so an unreachable bucket holds signing up
for seconds, not minutes; and each place that fails is reported, never raised, so the
checkpoint is kept and the failure shown (checkpoints._publish).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from aimon_admin.audit import chain

LATEST = "latest.json"
JSON_TYPE = "application/json"
PEM_TYPE = "application/x-pem-file"
# How the refusals and the chain verification name the bucket's newest checkpoint.
BUCKET_WHICH = "bucket's newest published"
# Connect within 3 s, an answer within 5 s, two tries: at worst seconds per call.
CLIENT_CONFIG = Config(connect_timeout=3, read_timeout=5, retries={"max_attempts": 2, "mode": "standard"})
_ABSENT = {"404", "NoSuchKey"}
_TAKEN = {"412", "PreconditionFailed", "ConditionalRequestConflict"}


class PublishedUnreadableError(Exception):
    """The newest published checkpoint is there but cannot be read."""


class BucketUnreachableError(PublishedUnreadableError):
    """The bucket did not answer, or refused: its newest checkpoint cannot be read."""


class BucketObjectTakenError(Exception):
    """An object that is never replaced is in the bucket already, with other bytes."""


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


def _publish_to_directory(document: dict[str, Any], public_pem: str) -> str:
    target = directory()
    target.mkdir(parents=True, exist_ok=True)
    key_file = target / f"public-key-{document['key_id']}.pem"
    if not key_file.exists():
        _write(key_file, public_pem)
    path = target / file_name(document)
    _write(path, document_text(document))
    _write(target / LATEST, document_text(document))
    return str(path)


def publish(document: dict[str, Any], public_pem: str) -> tuple[list[str], dict[str, str]]:
    """Write one checkpoint to the directory and the bucket, if one is named. Return where it
    went, and for each place it could not be written, why."""
    written: list[str] = []
    failed: dict[str, str] = {}
    try:
        written.append(_publish_to_directory(document, public_pem))
    except OSError as exc:
        failed[str(directory())] = str(exc)
    target = bucket()
    if target is not None:
        try:
            written.append(target.publish(document, public_pem))
        except (BotoCoreError, ClientError, BucketObjectTakenError, PublishedUnreadableError, OSError) as exc:
            failed[target.url] = _problem(exc)
    return written, failed


def _checkpoint(where: str, text: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PublishedUnreadableError(f"{where} is not a checkpoint (not JSON: {exc})") from exc
    if not isinstance(document, dict) or not {"tree_size", "root_hash", "log_id"} <= set(document):
        raise PublishedUnreadableError(f"{where} is not a checkpoint")
    return document


def read_latest() -> dict[str, Any] | None:
    """The newest checkpoint published to the directory, None when nothing was published yet."""
    path = directory() / LATEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PublishedUnreadableError(f"{path} cannot be read: {exc}") from exc
    return _checkpoint(str(path), text)


def latest_published(*, bucket_must_answer: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """The newest checkpoint each place holds (the directory's, then the bucket's), named as
    the refusals name them; a place that holds none yet is left out. PublishedUnreadableError
    when one cannot be read: a witness that cannot be asked is never taken as a silent one.
    Only before signing (bucket_must_answer off) is a bucket that does not answer left out: an
    outage does not stop signing, and publishing to it then fails and says so."""
    found = [("newest published", read_latest())]
    target = bucket()
    if target is not None:
        try:
            found.append((BUCKET_WHICH, target.read_latest()))
        except BucketUnreachableError:
            if bucket_must_answer:
                raise
    return [(which, document) for which, document in found if document is not None]


# --- The bucket ---------------------------------------------------------------------------


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _problem(exc: Exception) -> str:
    """A failure in words: the server's code and message, or botocore's sentence (which names
    the endpoint and the object, never the credentials)."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', 'error')}: {error.get('Message', '') or exc}"
    return str(exc)


@functools.cache
def _client(endpoint: str) -> Any:
    """One S3 client per endpoint for the process (making one reads the service's description,
    a fifth of a second); it takes its credentials from boto3's chain, and refreshes them when
    they come from a role."""
    import boto3  # here: most processes never publish, and it takes a tenth of a second to load

    config = CLIENT_CONFIG
    if endpoint:  # MinIO, Ceph and the like answer at bucket-in-the-path addresses
        config = config.merge(Config(s3={"addressing_style": "path"}))
    return boto3.session.Session().client("s3", endpoint_url=endpoint or None, config=config)


@dataclass(frozen=True)
class Bucket:
    url: str  # s3://BUCKET or s3://BUCKET/PREFIX, as set: what the pages name
    name: str
    prefix: str  # "" or ending in "/"
    endpoint: str  # "" for AWS

    def _exists(self, client: Any, key: str) -> bool:
        try:
            client.head_object(Bucket=self.name, Key=key)
        except ClientError as exc:
            if _code(exc) in _ABSENT:
                return False
            raise
        return True

    def _put_once(self, client: Any, name: str, text: str, content_type: str) -> None:
        """Put an object that is never replaced. The same bytes there already are fine (a retry);
        other bytes are BucketObjectTakenError."""
        key, body = self.prefix + name, text.encode()
        put = {"Bucket": self.name, "Key": key, "Body": body, "ContentType": content_type}
        if not self._exists(client, key):
            try:
                client.put_object(**put, IfNoneMatch="*")
                return
            except ClientError as exc:
                if _code(exc) == "NotImplemented":  # no conditional puts there: absent a moment ago
                    client.put_object(**put)
                    return
                if _code(exc) not in _TAKEN:
                    raise
        if client.get_object(Bucket=self.name, Key=key)["Body"].read() != body:
            raise BucketObjectTakenError(f"{self.url}/{name} is there already, other bytes: not replaced")

    def _catch_up(self, client: Any, name: str) -> None:
        """Copy from the directory the checkpoints the bucket missed (an outage) between its
        latest.json and `name`, with their keys: its series then has no gap, and verifies."""
        newest = self.read_latest()
        if newest is None:
            return  # a new bucket: its series starts here
        for path in sorted(directory().glob("checkpoint-*.json")):
            if file_name(newest) < path.name < name:
                text = path.read_text(encoding="utf-8")
                key_file = directory() / f"public-key-{_checkpoint(str(path), text)['key_id']}.pem"
                if key_file.exists():
                    self._put_once(client, key_file.name, key_file.read_text(encoding="utf-8"), PEM_TYPE)
                self._put_once(client, path.name, text, JSON_TYPE)

    def publish(self, document: dict[str, Any], public_pem: str) -> str:
        client = _client(self.endpoint)
        text = document_text(document)
        self._catch_up(client, file_name(document))
        self._put_once(client, f"public-key-{document['key_id']}.pem", public_pem, PEM_TYPE)
        self._put_once(client, file_name(document), text, JSON_TYPE)
        client.put_object(
            Bucket=self.name, Key=self.prefix + LATEST, Body=text.encode(), ContentType=JSON_TYPE
        )
        return f"{self.url}/{file_name(document)}"

    def read_latest(self) -> dict[str, Any] | None:
        where = f"{self.url}/{LATEST}"
        try:
            response = _client(self.endpoint).get_object(Bucket=self.name, Key=self.prefix + LATEST)
            body = response["Body"].read()
        except (BotoCoreError, ClientError) as exc:
            if isinstance(exc, ClientError) and _code(exc) in _ABSENT:
                return None
            raise BucketUnreachableError(f"{where} cannot be read: {_problem(exc)}") from exc
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PublishedUnreadableError(f"{where} is not a checkpoint (not UTF-8)") from exc
        return _checkpoint(where, text)


def bucket() -> Bucket | None:
    """The bucket AIMON_AUDIT_CHECKPOINT_S3_URL names (checked at start, settings/base.py), or None."""
    url = str(settings.AIMON_AUDIT_CHECKPOINT_S3_URL).rstrip("/")
    if not url:
        return None
    name, _, prefix = url.removeprefix("s3://").partition("/")
    prefix = prefix.strip("/")
    endpoint = str(settings.AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT)
    return Bucket(url=url, name=name, prefix=f"{prefix}/" if prefix else "", endpoint=endpoint)
