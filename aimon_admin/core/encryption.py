"""Secrets the product keeps for other systems, encrypted at rest (docs/operations.md, "Secrets
at rest").

An MCP server's environment, headers and URL, a channel's address and a webhook's signing
secret are stored through the two fields below: Fernet tokens (cryptography's authenticated
encryption: AES-128-CBC with HMAC-SHA256, a random IV per value), never the text itself. The
keys live outside the database, in AIMON_SECRETS_KEY (one key, or several, newest first,
separated by commas) or in the file AIMON_SECRETS_KEY_FILE names (one key a line, newest
first). The first key encrypts; every key decrypts (cryptography's MultiFernet), so a key is
rotated by putting a new one first, re-encrypting (`manage.py secrets_key reencrypt`), and
dropping the old one.

A stored value no key decrypts (tampered with, or its key dropped too early) is read as
`Unreadable`: falsy, equal only to itself, and written back unchanged if its row is saved,
so the value comes back once its key does. Whoever uses a secret checks for it and refuses
(an MCP sync fails, a message is not sent); the homes report it. Nothing here logs a value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import models, transaction

KEY_SETTING = "AIMON_SECRETS_KEY"
FILE_SETTING = "AIMON_SECRETS_KEY_FILE"
HOW_TO_MAKE = (
    "make one with `manage.py secrets_key create /etc/aimon/secrets-key` and set "
    "AIMON_SECRETS_KEY_FILE to that file (or put the key itself in AIMON_SECRETS_KEY)"
)
# Words people see (tests import these).
NO_KEY = (
    f"Neither {KEY_SETTING} nor {FILE_SETTING} is set: the secrets stored for other systems "
    f"cannot be read; {HOW_TO_MAKE}."
)
BOTH_SET = f"Set {KEY_SETTING} or {FILE_SETTING}, not both."
FILE_MISSING = (
    f"{FILE_SETTING} names {{path}}, which does not exist: restore it from its backup, or {HOW_TO_MAKE}."
)
FILE_UNREADABLE = f"{FILE_SETTING} names {{path}}, which cannot be read: {{problem}}."
FILE_EMPTY = f"{FILE_SETTING} names {{path}}, which holds no key; {HOW_TO_MAKE}."
NOT_A_KEY = (
    "{setting}: key {number} is not a Fernet key (32 random bytes in URL-safe base64, 44 "
    f"characters); {HOW_TO_MAKE}."
)
UNREADABLE_MESSAGE = (
    "A stored secret cannot be decrypted with the configured keys (a key was dropped before "
    "`manage.py secrets_key reencrypt`, or the value was changed in the database): restore the "
    "key, or enter the secret again."
)

# A Fernet token: version byte 0x80, a timestamp, a 16-byte IV, a block at least, a 32-byte HMAC.
_TOKEN_PREFIX = "gAAAAA"  # noqa: S105 # nosec B105 - a format's first bytes, not a secret
_TOKEN_MIN_BYTES = 1 + 8 + 16 + 16 + 32


class Unreadable:
    """A stored secret that no configured key decrypts. Falsy, so pages that list a secret's
    names show none; saved back as the token it was read as."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unreadable) and other.token == self.token

    def __hash__(self) -> int:
        return hash(("unreadable", self.token))

    def __repr__(self) -> str:
        return "<unreadable secret>"


def is_unreadable(*values: Any) -> bool:
    """Whether any of `values` is a stored secret no key decrypts."""
    return any(isinstance(value, Unreadable) for value in values)


# The operator's home says which stored secrets no key opens. Finding them decrypts every row
# of the table, so what was found (the rows' primary keys) is kept this long, under the keys in
# force; saving or deleting a row of the table forgets it at once (`unreadable_forget`).
UNREADABLE_KEPT_SECONDS = 300


def _unreadable_cache_key(model: type[models.Model]) -> str:
    ring = ",".join(key_id(key) for key in configured_keys())
    return f"aimon:secrets:unreadable:{model._meta.label_lower}:{ring}"


def unreadable_rows(queryset: models.QuerySet, *fields: str) -> list[models.Model]:
    """The rows of `queryset` with a value in `fields` that no configured key decrypts. The
    whole table is read at most once per UNREADABLE_KEPT_SECONDS (or after a change to it),
    in chunks; the rows found are then read by primary key."""
    cache_key = _unreadable_cache_key(queryset.model)
    found = cache.get(cache_key)
    if found is None:
        rows = queryset.order_by().values_list("pk", *fields).iterator(chunk_size=2000)
        found = [pk for pk, *values in rows if is_unreadable(*values)]
        cache.set(cache_key, found, UNREADABLE_KEPT_SECONDS)
    return list(queryset.filter(pk__in=found)) if found else []


def unreadable_forget(sender: type[models.Model], **_: Any) -> None:
    """post_save and post_delete of a model with encrypted fields: its finding is stale."""
    cache.delete(_unreadable_cache_key(sender))


def key_id(key: str | bytes) -> str:
    """A short name for a key that gives nothing of it away (12 hex digits of its SHA-256)."""
    raw = key.encode() if isinstance(key, str) else key
    return hashlib.sha256(raw.strip()).hexdigest()[:12]


def new_key() -> str:
    return Fernet.generate_key().decode()


def create_key_file(path: Path) -> str:
    """Write a new key to `path` (readable by its owner only), refusing to replace a file."""
    key = new_key()
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(key + "\n")
    return key


def _file_keys(path: Path) -> list[str]:
    if not path.exists():
        raise ImproperlyConfigured(FILE_MISSING.format(path=path))
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ImproperlyConfigured(FILE_UNREADABLE.format(path=path, problem=exc)) from exc
    keys = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not keys:
        raise ImproperlyConfigured(FILE_EMPTY.format(path=path))
    return keys


def configured_keys() -> list[str]:
    """The keys, newest first, from the environment or the key file; ImproperlyConfigured,
    naming the setting, when there are none or one is not a key."""
    inline = str(getattr(settings, KEY_SETTING, "") or "").strip()
    file = str(getattr(settings, FILE_SETTING, "") or "").strip()
    return list(_keys(inline, file))


@lru_cache(maxsize=8)
def _keys(inline: str, file: str) -> tuple[str, ...]:
    """Read and checked once per process and setting (a failure is not kept: it raises again)."""
    if inline and file:
        raise ImproperlyConfigured(BOTH_SET)
    if not inline and not file:
        raise ImproperlyConfigured(NO_KEY)
    keys = [key.strip() for key in inline.split(",") if key.strip()] if inline else _file_keys(Path(file))
    if not keys:
        raise ImproperlyConfigured(NO_KEY)
    for number, key in enumerate(keys, start=1):
        try:
            raw = base64.urlsafe_b64decode(key.encode())
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            setting = KEY_SETTING if inline else FILE_SETTING
            raise ImproperlyConfigured(NOT_A_KEY.format(setting=setting, number=number))
    return tuple(keys)


@lru_cache(maxsize=4)
def _ring(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys])


def key_ring() -> MultiFernet:
    """Every configured key: the first encrypts, all decrypt. A key file is read once per
    process (restart after changing it); a test's override_settings takes effect at once."""
    inline = str(getattr(settings, KEY_SETTING, "") or "").strip()
    file = str(getattr(settings, FILE_SETTING, "") or "").strip()
    return _ring(_keys(inline, file))


def newest_key() -> Fernet:
    return Fernet(configured_keys()[0])


def encrypt(text: str) -> str:
    return key_ring().encrypt(text.encode()).decode()


def decrypt(token: str) -> str:
    """The text of `token`; InvalidToken when no configured key decrypts it."""
    return key_ring().decrypt(token.encode()).decode()


def looks_like_token(value: str) -> bool:
    """Whether `value` has a Fernet token's shape (not whether any key opens it)."""
    if not value.startswith(_TOKEN_PREFIX):
        return False
    try:
        return len(base64.urlsafe_b64decode(value.encode())) >= _TOKEN_MIN_BYTES
    except (binascii.Error, ValueError):
        return False


def _opened(token: str) -> str | Unreadable:
    try:
        return decrypt(token)
    except (InvalidToken, UnicodeDecodeError):
        return Unreadable(token)


def redact_url(url: str) -> str:
    """A URL as logs, messages and the audit log show it: its credentials and query values
    are secrets, so they go."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    netloc = f"***@{host}" if parts.username or parts.password else host
    query = "&".join(f"{key}=***" for key, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


class EncryptedFieldMixin:
    """Stored as a Fernet token in a text column; dumps (dumpdata) carry the token too, and
    loading one (loaddata) decrypts it again."""

    # Each field says what is stored for a value (`sealed`: plaintext in, token out) and what
    # a stored token holds (`opened`: the value, or Unreadable).

    def get_prep_value(self, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, Unreadable):
            return value.token
        return self.sealed(value)  # type: ignore[attr-defined]

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return value if value is None else self.opened(value)  # type: ignore[attr-defined]

    def value_to_string(self, obj: models.Model) -> str:
        return self.get_prep_value(self.value_from_object(obj))  # type: ignore[attr-defined]

    def run_validators(self, value: Any) -> None:
        if not isinstance(value, Unreadable):
            super().run_validators(value)  # type: ignore[misc]


class EncryptedTextField(EncryptedFieldMixin, models.TextField):
    """Text encrypted at rest. The empty string is stored as it is, so a constraint can still
    tell a secret that is set from one that is not (and nothing else about it)."""

    def sealed(self, value: Any) -> str:
        text = str(value)
        return "" if text == "" else encrypt(text)

    def opened(self, token: str) -> str | Unreadable:
        return "" if token == "" else _opened(token)  # nosec B105 # the empty value, stored as it is

    def to_python(self, value: Any) -> Any:
        if isinstance(value, Unreadable) or value is None:
            return value
        text = str(value)
        return _opened(text) if looks_like_token(text) else text


class EncryptedJSONField(EncryptedFieldMixin, models.TextField):
    """A JSON value (an MCP server's env or headers) encrypted at rest, as one token."""

    def sealed(self, value: Any) -> str:
        return encrypt(json.dumps(value, sort_keys=True, separators=(",", ":")))

    def opened(self, token: str) -> Any:
        text = _opened(token)
        return text if isinstance(text, Unreadable) else json.loads(text)

    def to_python(self, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if looks_like_token(value):
            return self.opened(value)
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValidationError("Enter valid JSON.", code="invalid") from exc


# --- Rewriting stored values (migrations, key rotation) -----------------------------------------

BATCH = 500
MIGRATION_UNREADABLE = (
    "{table}.{column} of row {pk} looks encrypted but no key in AIMON_SECRETS_KEY or "
    "AIMON_SECRETS_KEY_FILE decrypts it: configure the key it was encrypted with, then migrate again."
)
# What re-encrypting did to one stored value (rewrite_columns' `change` says).
REWRITTEN, CURRENT, UNREADABLE = "rewritten", "current", "unreadable"


def encrypted_fields() -> list[tuple[type[models.Model], tuple[str, ...]]]:
    """Every model with encrypted fields, and their names: what key rotation re-encrypts."""
    from django.apps import apps

    found = []
    for model in apps.get_models():
        names = tuple(f.name for f in model._meta.concrete_fields if isinstance(f, EncryptedFieldMixin))
        if names:
            found.append((model, names))
    return found


def rewrite_columns(
    model: type[models.Model],
    connection: Any,
    fields: tuple[str, ...],
    change: Callable[[str, str, Any], tuple[str, str]],
    *,
    batch: int = BATCH,
) -> dict[str, dict[str, int]]:
    """Run `change(column, stored, pk)` over every non-empty stored value of `fields`, in
    batches of `batch` rows, each batch its own transaction; `change` returns what happened
    (REWRITTEN, CURRENT, UNREADABLE) and the value to store. Raw SQL: the stored form is what
    is read and written, never a decrypted value. A value is replaced only if it is still the
    one read, so a change saved meanwhile is kept; counts per field and outcome are returned.
    Stopped half-way, it is simply run again: what is done already comes back CURRENT."""
    meta = model._meta
    quote = connection.ops.quote_name
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    columns = {name: meta.get_field(name).column for name in fields}
    listed = ", ".join(quote(column) for column in columns.values())
    counts = {name: {REWRITTEN: 0, CURRENT: 0, UNREADABLE: 0} for name in fields}
    last = None
    while True:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            after = "" if last is None else f" WHERE {pk} > %s"
            cursor.execute(
                f"SELECT {pk}, {listed} FROM {table}{after} ORDER BY {pk} LIMIT {int(batch)}",  # noqa: S608 # nosec B608 - names from the model, quoted
                [] if last is None else [last],
            )
            rows = cursor.fetchall()
            for row_pk, *values in rows:
                for (name, column), value in zip(columns.items(), values, strict=True):
                    if value is None or value == "":
                        continue
                    stored = value if isinstance(value, str) else json.dumps(value)
                    outcome, new = change(column, stored, row_pk)
                    counts[name][outcome] += 1
                    if new != stored:
                        cell = quote(column)
                        cursor.execute(
                            f"UPDATE {table} SET {cell} = %s WHERE {pk} = %s AND {cell} = %s",  # noqa: S608 # nosec B608 - names from the model, quoted
                            [new, row_pk, stored],
                        )
        if len(rows) < batch:
            return counts
        last = rows[-1][0]


def migrate_columns(
    model: type[models.Model], schema_editor: Any, fields: tuple[str, ...], *, seal: bool
) -> None:
    """A migration's step: encrypt (`seal`) every stored value of `fields` that is still
    plaintext, or decrypt every one (going back). A value in a form no key opens stops it."""
    table = model._meta.db_table

    def change(column: str, stored: str, pk: Any) -> tuple[str, str]:
        if looks_like_token(stored):
            opened = _opened(stored)
            if isinstance(opened, Unreadable):
                raise ImproperlyConfigured(MIGRATION_UNREADABLE.format(table=table, column=column, pk=pk))
            return (CURRENT, stored) if seal else (REWRITTEN, opened)
        return (REWRITTEN, encrypt(stored)) if seal else (CURRENT, stored)

    rewrite_columns(model, schema_editor.connection, fields, change)


def reencrypt_all(*, batch: int = BATCH) -> dict[str, dict[str, int]]:
    """Key rotation's second step: every stored secret not yet under the newest key is
    re-encrypted with it. Counts per `app.Model.field`: rewritten, already current, and
    unreadable (no configured key opens it: left as it is)."""
    from django.db import connections, router

    newest, ring = newest_key(), key_ring()

    def change(column: str, stored: str, pk: Any) -> tuple[str, str]:
        try:
            newest.decrypt(stored.encode())
            return CURRENT, stored
        except InvalidToken:
            pass
        try:
            return REWRITTEN, ring.rotate(stored.encode()).decode()
        except InvalidToken:
            return UNREADABLE, stored

    counts = {}
    for model, fields in encrypted_fields():
        connection = connections[router.db_for_write(model)]
        for name, figures in rewrite_columns(model, connection, fields, change, batch=batch).items():
            counts[f"{model._meta.label}.{name}"] = figures
    return counts
