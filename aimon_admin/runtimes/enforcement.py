"""Which enforcement point (G1-G3) last called with a runtime's tokens, and when.

Each of the product's enforcement points names itself in its User-Agent's first product
token: `aimon-client/…` (the runtime client library, G1), `aimon-gateway/…` (the MCP
gateway, G2), `aimon-claude-hook/…` (the Claude Code hook, G3); any other caller is OTHER.
Every authenticated API call notes its caller here (`note_call`), and the runtime's page
shows when each point last called.

A reading, not a change: nothing is audited (A1 lists changes; a call's own effects are
audited where they happen). It must cost the decision path nothing measurable, so it is
kept the way a token's `last_used_at` is (runtimes.selectors): to the minute, written at most
once per `RESOLUTION` per runtime and point. Where the token's write knows it is due from
the token row it has just read, nothing on the decision path reads this table: each process
remembers when it last wrote each (runtime, point), so a call in between costs a dictionary
lookup, and the write itself is one upsert that only ever moves the time forward (several
processes each write at most once a minute; the row keeps the latest). The write runs on
the request's thread, as the token's does, not as a hint (core.hints): hints are Redis and
Celery messages whose thread holds no database connection, and a failed hint there stops
the others for a while; here a failed write is logged and the call goes on.

The header is the caller's to fill, so only a bounded, plain label is kept: the first
product token, its name and version made of letters, digits and `._+~-` only, at most
`CALLER_PRODUCT_MAX` characters; anything else is kept as no label at all.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import time

from django.db import DatabaseError, connection, transaction
from django.http import HttpRequest
from django.utils import timezone
from rest_framework.request import Request

from aimon_admin.runtimes.choices import EnforcementPoint
from aimon_admin.runtimes.models import CALLER_PRODUCT_MAX, EnforcementPointCall
from aimon_admin.runtimes.selectors import LAST_USED_RESOLUTION

logger = logging.getLogger(__name__)

# The product names each enforcement point sends (G1-G3), compared without case.
PRODUCTS = {
    "aimon-client": EnforcementPoint.CLIENT,
    "aimon-gateway": EnforcementPoint.GATEWAY,
    "aimon-claude-hook": EnforcementPoint.CLAUDE_HOOK,
}
RESOLUTION = LAST_USED_RESOLUTION.total_seconds()
# Only the header's start is read: the first product token is all that is kept of it.
HEADER_READ_MAX = 200
_NAME = re.compile(r"[A-Za-z0-9._+~-]{1,60}")
_VERSION = re.compile(r"[A-Za-z0-9._+~-]{1,39}")

# (runtime id, point) -> time.monotonic() of this process's last write for it.
_written: dict[tuple[int, str], float] = {}


def caller_of(user_agent: str) -> tuple[EnforcementPoint, str]:
    """The enforcement point a User-Agent names and the label kept of it: its first product
    token (`name` or `name/version`), or "" when that token is not plain enough to keep."""
    return _caller_of(user_agent[:HEADER_READ_MAX])


@functools.lru_cache(maxsize=256)
def _caller_of(start: str) -> tuple[EnforcementPoint, str]:
    words = start.split(None, 1)
    if not words:
        return EnforcementPoint.OTHER, ""
    name, slash, version = words[0].partition("/")
    if not _NAME.fullmatch(name):
        return EnforcementPoint.OTHER, ""
    product = f"{name}/{version}" if slash and _VERSION.fullmatch(version) else name
    return PRODUCTS.get(name.lower(), EnforcementPoint.OTHER), product[:CALLER_PRODUCT_MAX]


def note_request(request: HttpRequest | Request, runtime_id: int) -> bool:
    """`note_call` for an API request authenticated as this runtime."""
    return note_call(runtime_id=runtime_id, user_agent=request.META.get("HTTP_USER_AGENT", ""))


def note_call(*, runtime_id: int, user_agent: str) -> bool:
    """Note that the caller `user_agent` names called as this runtime, now. True when it was
    written (the first call of its point this process has seen in `RESOLUTION`)."""
    point, product = caller_of(user_agent)
    key = (runtime_id, point.value)
    now = time.monotonic()
    last = _written.get(key)
    if last is not None and now - last < RESOLUTION:
        return False
    # Marked before the write: a write that fails is tried again a minute later, not on
    # every call in between.
    _written[key] = now
    # Inside a transaction, in a savepoint of its own: a failed write never breaks the caller's.
    guard = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    try:
        with guard, connection.cursor() as cursor:
            cursor.execute(_upsert_sql(connection.vendor), _values(runtime_id, point, product))
    except DatabaseError as exc:
        logger.warning("could not note the %s call of runtime %s: %s", point.label, runtime_id, exc)
    return True


def forget() -> None:
    """Forget what this process wrote, so the next call of each point writes (tests)."""
    _written.clear()


def _values(runtime_id: int, point: EnforcementPoint, product: str) -> list[object]:
    called = EnforcementPointCall._meta.get_field("last_called_at")
    return [runtime_id, point.value, product, called.get_db_prep_save(timezone.now(), connection)]


@functools.cache
def _upsert_sql(vendor: str) -> str:
    """Insert the row, or move the existing one's time forward (never back: a process whose
    clock or write lags does not undo a later one). PostgreSQL and SQLite alike."""
    meta = EnforcementPointCall._meta
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    runtime, point, product, called = (
        quote(meta.get_field(name).column) for name in ("runtime", "point", "product", "last_called_at")
    )
    return (
        f"INSERT INTO {table} ({runtime}, {point}, {product}, {called}) VALUES (%s, %s, %s, %s) "  # noqa: S608 - names from the model, values are parameters # nosec B608
        f"ON CONFLICT ({runtime}, {point}) DO UPDATE SET {product} = excluded.{product}, "
        f"{called} = excluded.{called} WHERE {table}.{called} < excluded.{called}"
    )
