"""Reads for agent runtimes and tokens."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Count, F, Q, QuerySet
from django.utils import timezone

from aimon_admin.core import rawsql
from aimon_admin.runtimes.choices import EnforcementPoint
from aimon_admin.runtimes.models import AgentRuntime, EnforcementPointCall, RuntimeToken
from aimon_admin.runtimes.tokens import token_hash, token_looks_valid

# last_used_at is refreshed at most this often, so a busy runtime does not turn every
# API call into a write.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)


def runtime_list() -> QuerySet[AgentRuntime]:
    """Every runtime, the retired ones last."""
    return (
        AgentRuntime.objects.select_related("owner")
        .annotate(active_tokens=Count("tokens", filter=Q(tokens__revoked_at__isnull=True)))
        .order_by(F("retired_at").asc(nulls_first=True), "name")
    )


def runtime_tokens(*, runtime: AgentRuntime) -> QuerySet[RuntimeToken]:
    return runtime.tokens.select_related("created_by", "revoked_by")


_TOKEN_FIELDS = rawsql.all_columns(RuntimeToken)
_RUNTIME_FIELDS = rawsql.all_columns(AgentRuntime)


TOKEN_COLUMNS = len(_TOKEN_FIELDS) + len(_RUNTIME_FIELDS)


def token_select() -> tuple[str, str]:
    """(column list, FROM ... WHERE ...) of the token lookup, its one parameter the hash.

    The SQL of `token_authenticate`, for a statement that looks the token up with more in
    the same round trip (the skill decision's fused read); `token_from_row` builds what
    it read, `TOKEN_COLUMNS` values.
    """
    return _token_parts(connection.vendor)


@functools.cache
def _token_parts(vendor: str) -> tuple[str, str]:
    columns = (
        f"{rawsql.select_list(RuntimeToken, 't', _TOKEN_FIELDS)}, "
        f"{rawsql.select_list(AgentRuntime, 'r', _RUNTIME_FIELDS)}"
    )
    source = (
        f"FROM {RuntimeToken._meta.db_table} t JOIN {AgentRuntime._meta.db_table} r ON r.id = t.runtime_id "
        "WHERE t.token_hash = %s AND t.revoked_at IS NULL AND r.is_active"
    )
    return columns, source


@functools.cache
def _token_sql(vendor: str) -> str:
    columns, source = _token_parts(vendor)
    return f"SELECT {columns} {source}"  # nosec B608 - no input in the text


def token_authenticate(raw: str) -> RuntimeToken | None:
    """The active token of an active runtime that `raw` is, or None.

    Plain SQL, one indexed lookup by the token's hash: every API call runs it, and the
    ORM's query building was most of a decision's cost (measured in benchmarks/load.py).
    Nothing is cached, so a revoke holds on the next call on every node.
    """
    if not token_looks_valid(raw):
        return None
    with connection.cursor() as cursor:
        cursor.execute(_token_sql(connection.vendor), [token_hash(raw)])
        row = cursor.fetchone()
    if row is None:
        return None
    return token_from_row(row)


RUNTIME_DISABLED = "disabled"
RUNTIME_RETIRED = "retired"


def token_refusal_reason(raw: str) -> str | None:
    """Why `raw`, which did not authenticate, was refused, when its runtime is the reason:
    RUNTIME_RETIRED, RUNTIME_DISABLED, or None (unknown or revoked: the usual refusal).

    Read only after a refusal, so an accepted call never pays for it. Whoever presents the
    token holds it already, so naming its runtime's state tells them nothing new.
    """
    if not token_looks_valid(raw):
        return None
    row = (
        RuntimeToken.objects.filter(token_hash=token_hash(raw))
        .values_list("revoked_at", "runtime__is_active", "runtime__retired_at")
        .first()
    )
    if row is None:
        return None
    revoked_at, runtime_active, retired_at = row
    if retired_at is not None:
        return RUNTIME_RETIRED
    if revoked_at is None and not runtime_active:
        return RUNTIME_DISABLED
    return None


def token_from_row(row: Sequence[Any]) -> RuntimeToken:
    """The token and its runtime from the `TOKEN_COLUMNS` values `token_select` read, its
    `last_used_at` refreshed as every authentication does (at most once per
    LAST_USED_RESOLUTION)."""
    token = rawsql.build(RuntimeToken, _TOKEN_FIELDS, row[: len(_TOKEN_FIELDS)])
    token.runtime = rawsql.build(AgentRuntime, _RUNTIME_FIELDS, row[len(_TOKEN_FIELDS) : TOKEN_COLUMNS])
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        RuntimeToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


@dataclass(frozen=True)
class PointLastCall:
    """When one enforcement point (G1-G3) last called as a runtime (None: never), and the
    product token it named itself by."""

    point: EnforcementPoint
    last_called_at: dt.datetime | None
    product: str = ""


# The product's own points, always shown (never called is worth knowing); OTHER once seen.
SHOWN_POINTS = (EnforcementPoint.GATEWAY, EnforcementPoint.CLAUDE_HOOK, EnforcementPoint.CLIENT)


def runtime_point_calls(*, runtime: AgentRuntime) -> list[PointLastCall]:
    """Which enforcement point last called as this runtime and when, to the minute."""
    rows = {row.point: row for row in EnforcementPointCall.objects.filter(runtime=runtime)}
    shown = [*SHOWN_POINTS, *([EnforcementPoint.OTHER] if EnforcementPoint.OTHER in rows else [])]
    return [
        PointLastCall(point, rows[point].last_called_at, rows[point].product)
        if point in rows
        else PointLastCall(point, None)
        for point in shown
    ]
