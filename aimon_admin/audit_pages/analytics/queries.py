"""Decision analytics' queries: they aggregate in SQL, grouped by day (UTC) or by runtime, so
the work is one pass per table however many rows there are; Python only sees one row per
group. Median and p90 time to answer are `percentile_cont` on PostgreSQL; SQLite has no
percentile function, so an ordered window numbers each group's durations and only the (at
most four) rows either side of each percentile come back, to be interpolated exactly as
`percentile_cont` does.

Plain SQL: grouping by a day expression and the percentile aggregates are not expressible
in the ORM without per-row Python functions on SQLite (TruncDate), which cost seconds at
300,000 requests. Table and column names come from the models; values are parameters.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from django.db import connection

from aimon_admin.approvals.choices import GrantDecision, GrantOrigin, RequestStatus, RevokeReason
from aimon_admin.approvals.models import ApprovalRequest, Grant

_REQ = ApprovalRequest._meta.db_table
_GRANT = Grant._meta.db_table
PERSON_ANSWER_ORIGINS = (GrantOrigin.ANSWER, GrantOrigin.ESCALATION)
REVOCATION_REASONS = (RevokeReason.CLEAR, RevokeReason.REVOKE, RevokeReason.REVOKE_AGENT, RevokeReason.SINGLE)


def _day(column: str) -> str:
    if connection.vendor == "postgresql":
        return f"CAST(({column} AT TIME ZONE 'UTC') AS date)"
    return f"date({column})"  # SQLite stores UTC text: its first ten characters


def _params(start: dt.datetime, end: dt.datetime) -> list[Any]:
    adapt = connection.ops.adapt_datetimefield_value
    return [adapt(start), adapt(end)]


def _runtime_clause(column: str, runtime_id: int | None, params: list[Any]) -> str:
    if runtime_id is None:
        return ""
    params.append(runtime_id)
    return f" AND {column} = %s"


def _marks(values: Sequence[Any]) -> str:
    return ", ".join(["%s"] * len(values))


def _fetch(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def request_rows(start: dt.datetime, end: dt.datetime, runtime_id: int | None) -> list[tuple]:
    """(day, runtime, requests, answered, expired, cancelled) by the day each was opened."""
    day = _day("r.created_at")
    params = [RequestStatus.ANSWERED.value, RequestStatus.EXPIRED.value, RequestStatus.CANCELLED.value]
    params += _params(start, end)
    where = _runtime_clause("r.runtime_id", runtime_id, params)
    return _fetch(
        f"SELECT {day}, r.runtime_id, COUNT(*), "  # noqa: S608 - names from the models, values are parameters # nosec B608
        "SUM(CASE WHEN r.status = %s THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN r.status = %s THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN r.status = %s THEN 1 ELSE 0 END) "
        f"FROM {_REQ} r WHERE r.created_at >= %s AND r.created_at < %s{where} "
        f"GROUP BY {day}, r.runtime_id",
        params,
    )


def answer_rows(start: dt.datetime, end: dt.datetime, runtime_id: int | None) -> list[tuple]:
    """(day, runtime, allowed, denied, escalations): the grants people's answers wrote, by
    the day they were written. One grant per skill a person answered; chain decisions and
    abort-denies write none of these."""
    day = _day("g.created_at")
    params: list[Any] = [GrantDecision.ALLOW.value, GrantDecision.DENY.value, GrantOrigin.ESCALATION.value]
    params += [origin.value for origin in PERSON_ANSWER_ORIGINS]
    params += _params(start, end)
    where = _runtime_clause("g.runtime_id", runtime_id, params)
    return _fetch(
        f"SELECT {day}, g.runtime_id, "  # noqa: S608 - names from the models, values are parameters # nosec B608
        "SUM(CASE WHEN g.decision = %s THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN g.decision = %s THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN g.origin = %s THEN 1 ELSE 0 END) "
        f"FROM {_GRANT} g WHERE g.origin IN ({_marks(PERSON_ANSWER_ORIGINS)}) "
        f"AND g.created_at >= %s AND g.created_at < %s{where} GROUP BY {day}, g.runtime_id",
        params,
    )


def revocation_rows(start: dt.datetime, end: dt.datetime, runtime_id: int | None) -> list[tuple]:
    """(day, runtime, grants cleared or revoked) by the day they were removed."""
    day = _day("g.revoked_at")
    params: list[Any] = [reason.value for reason in REVOCATION_REASONS]
    params += _params(start, end)
    where = _runtime_clause("g.runtime_id", runtime_id, params)
    return _fetch(
        f"SELECT {day}, g.runtime_id, COUNT(*) FROM {_GRANT} g "  # noqa: S608 - names from the models, values are parameters # nosec B608
        f"WHERE g.revoke_reason IN ({_marks(REVOCATION_REASONS)}) "
        f"AND g.revoked_at >= %s AND g.revoked_at < %s{where} GROUP BY {day}, g.runtime_id",
        params,
    )


def _waits(params: list[Any], start: dt.datetime, end: dt.datetime, runtime_id: int | None) -> str:
    """FROM and WHERE of the requests a person answered, opened in the period."""
    params += [RequestStatus.ANSWERED.value, *_params(start, end)]
    where = _runtime_clause("r.runtime_id", runtime_id, params)
    return (
        f"FROM {_REQ} r WHERE r.status = %s AND r.answered_by_id IS NOT NULL "
        f"AND r.answered_at IS NOT NULL AND r.created_at >= %s AND r.created_at < %s{where}"
    )


def wait_percentile_rows(
    start: dt.datetime, end: dt.datetime, runtime_id: int | None, per_runtime: bool
) -> list[tuple[str, Any, int, float | None, float | None]]:
    """("day" | "runtime" | "all", key, how many, median seconds, p90 seconds)."""
    if connection.vendor != "postgresql":
        kinds = [("day", _day("r.created_at")), ("all", "'all'")]
        if per_runtime:
            kinds.append(("runtime", "r.runtime_id"))
        return [
            (kind, key, n, median, p90)
            for kind, expression in kinds
            for key, n, median, p90 in _wait_percentiles_windowed(expression, start, end, runtime_id)
        ]
    params: list[Any] = []
    source = _waits(params, start, end, runtime_id)
    if per_runtime:
        sets, key = "(d), (rt), ()", "COALESCE(CAST(d AS text), CAST(rt AS text))"
        kind = "CASE WHEN GROUPING(d) = 0 THEN 'day' WHEN GROUPING(rt) = 0 THEN 'runtime' ELSE 'all' END"
    else:
        sets, key = "(d), ()", "CAST(d AS text)"
        kind = "CASE WHEN GROUPING(d) = 0 THEN 'day' ELSE 'all' END"
    rows = _fetch(
        f"SELECT {kind}, {key}, COUNT(*), "  # noqa: S608 - names from the models, values are parameters # nosec B608
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY s), percentile_cont(0.9) WITHIN GROUP (ORDER BY s) "
        f"FROM (SELECT {_day('r.created_at')} AS d, r.runtime_id AS rt, "
        f"EXTRACT(EPOCH FROM (r.answered_at - r.created_at)) AS s {source}) w "
        f"GROUP BY GROUPING SETS ({sets})",
        params,
    )
    return [(kind, key, int(n), _round(median), _round(p90)) for kind, key, n, median, p90 in rows if n]


def _wait_percentiles_windowed(
    key: str, start: dt.datetime, end: dt.datetime, runtime_id: int | None
) -> list[tuple[Any, int, float | None, float | None]]:
    # Number each group's durations in order; keep only the rows at floor(p*(n-1)) and the
    # one after it, for p = 0.5 and 0.9: at most four rows per group leave the database.
    params: list[Any] = []
    source = _waits(params, start, end, runtime_id)
    picks = " OR ".join(
        f"(o.i = CAST({p} * (o.n - 1) AS INTEGER) OR o.i = CAST({p} * (o.n - 1) AS INTEGER) + 1)"
        for p in (0.5, 0.9)
    )
    rows = _fetch(
        "WITH d AS ("  # noqa: S608 - names from the models, values are parameters # nosec B608
        f"SELECT {key} AS k, (julianday(r.answered_at) - julianday(r.created_at)) * 86400.0 AS s {source}), "
        "o AS (SELECT k, s, ROW_NUMBER() OVER (PARTITION BY k ORDER BY s) - 1 AS i, "
        "COUNT(*) OVER (PARTITION BY k) AS n FROM d) "
        f"SELECT o.k, o.n, o.i, o.s FROM o WHERE {picks}",
        params,
    )
    ranked: dict[Any, tuple[int, dict[int, float]]] = {}
    for k, n, i, s in rows:
        ranked.setdefault(k, (int(n), {}))[1][int(i)] = float(s)
    return [
        (k, n, _round(percentile_from_ranks(values, n, 0.5)), _round(percentile_from_ranks(values, n, 0.9)))
        for k, (n, values) in ranked.items()
    ]


def percentile_from_ranks(values: dict[int, float], n: int, p: float) -> float | None:
    """`percentile_cont(p)` of n sorted values, given (at least) the two around p*(n-1)."""
    if n == 0:
        return None
    position = p * (n - 1)
    low = int(position)  # floor: position is never negative
    below = values[low]
    above = values.get(low + 1, below)
    return below + (above - below) * (position - low)


def _round(value: Any) -> float | None:
    # Millisecond precision: SQLite's julianday arithmetic is good to about 0.1 ms.
    return None if value is None else round(float(value), 3)
