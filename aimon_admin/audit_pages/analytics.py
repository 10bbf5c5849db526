"""Decision analytics: how runtimes' approval requests fare, per day and per runtime.

Two halves, both free of views and templates:

* **Queries** aggregate in SQL, grouped by day (UTC) or by runtime, so the work is one
  pass per table however many rows there are; Python only sees one row per group. Median
  and p90 time to answer are `percentile_cont` on PostgreSQL; SQLite has no percentile
  function, so an ordered window numbers each group's durations and only the (at most
  four) rows either side of each percentile come back, to be interpolated exactly as
  `percentile_cont` does.
* **Chart geometry** turns those numbers into coordinates for server-drawn SVG: bars,
  stacked bars and lines with gaps, on a "nice" y scale. Pure functions, no Django.

What is counted (each request counted on the day it was created):

* requests: approval requests opened; answered / expired / cancelled: how they ended;
* approval rate: of the skills a person answered, the share answered with an ALLOW,
  counted on the day they were answered (the grant each answer wrote);
* time to answer: from a request's creation to its last skill's answer, for requests a
  person answered (those the chain decided at once are not waits);
* escalations: session answers written agent-wide (S6), on the day they were written;
* revocations: grants cleared or revoked (S10), on the day they were revoked; a grant
  replaced by a newer answer or ended by the session's idle TTL is not a revocation.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from aimon_admin.approvals.choices import GrantDecision, GrantOrigin, RequestStatus, RevokeReason
from aimon_admin.approvals.models import ApprovalRequest, Grant

PERIOD_DEFAULT = "30d"
PERIOD_CHOICES = ("7d", "30d", "90d")
PERIOD_MAX_DAYS = 366
REVOCATION_REASONS = (RevokeReason.CLEAR, RevokeReason.REVOKE, RevokeReason.REVOKE_AGENT, RevokeReason.SINGLE)
RUNTIME_ROWS_SHOWN = 50
_PERIOD = re.compile(r"^([1-9][0-9]{0,2})d$")

PERIOD_PROBLEM = "must be a number of days such as 7d, 30d or 90d (at most {max}d)"


class AnalyticsInputError(ValueError):
    """A query-string value that cannot be read; `field` names the parameter."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def parse_period(value: str | None) -> int:
    """'30d' → 30. Empty means the default; anything else that is not N days is refused."""
    text = (value or "").strip() or PERIOD_DEFAULT
    match = _PERIOD.match(text)
    if match is None or int(match.group(1)) > PERIOD_MAX_DAYS:
        raise AnalyticsInputError("period", PERIOD_PROBLEM.format(max=PERIOD_MAX_DAYS))
    return int(match.group(1))


def period_days(*, today: dt.date, days: int) -> list[dt.date]:
    """The `days` days ending with `today`, oldest first."""
    return [today - dt.timedelta(days=offset) for offset in range(days - 1, -1, -1)]


# --- Figures ---------------------------------------------------------------------------------------


@dataclass
class Figures:
    """One group's numbers: a day, or a runtime over the whole period."""

    requests: int = 0
    answered: int = 0
    expired: int = 0
    cancelled: int = 0
    allowed: int = 0
    denied: int = 0
    timed: int = 0  # requests with a time to answer
    median_seconds: float | None = None
    p90_seconds: float | None = None
    escalations: int = 0
    revocations: int = 0

    @property
    def pending(self) -> int:
        return self.requests - self.answered - self.expired - self.cancelled

    @property
    def quiet(self) -> bool:
        """Nothing happened: no request opened, no answer, escalation or revocation."""
        return not (self.requests or self.allowed or self.denied or self.escalations or self.revocations)

    @property
    def approval_rate(self) -> float | None:
        """Allowed share of the skills a person answered, 0..1 (None: nobody answered)."""
        answered = self.allowed + self.denied
        return self.allowed / answered if answered else None


@dataclass
class Report:
    days: list[dt.date]
    start: dt.datetime
    end: dt.datetime
    by_day: dict[dt.date, Figures]
    totals: Figures
    by_runtime: dict[int, Figures] = field(default_factory=dict)

    def series(self) -> list[tuple[dt.date, Figures]]:
        return [(day, self.by_day[day]) for day in self.days]


def decision_report(*, today: dt.date, days: int, runtime_id: int | None, per_runtime: bool = True) -> Report:
    """Every figure for the `days` days ending with `today` (UTC), for one runtime or all.

    Per day always; per runtime (the whole period) when `per_runtime`. Four scans: requests,
    grants by creation, grants by revocation (each grouped by day and runtime at once and
    folded here), and the waits' percentiles (PostgreSQL: one scan with grouping sets).
    """
    window = period_days(today=today, days=days)
    start = dt.datetime.combine(window[0], dt.time.min, tzinfo=dt.UTC)
    end = dt.datetime.combine(today + dt.timedelta(days=1), dt.time.min, tzinfo=dt.UTC)
    report = Report(
        days=window, start=start, end=end, by_day={day: Figures() for day in window}, totals=Figures()
    )

    def targets(day: Any, runtime: int) -> list[Figures]:
        found = [report.totals]
        figures_of_day = report.by_day.get(_as_date(day))
        if figures_of_day is not None:
            found.append(figures_of_day)
        if per_runtime:
            found.append(report.by_runtime.setdefault(runtime, Figures()))
        return found

    for day, runtime, requests, answered, expired, cancelled in _requests(start, end, runtime_id):
        for figures in targets(day, runtime):
            figures.requests += int(requests)
            figures.answered += int(answered or 0)
            figures.expired += int(expired or 0)
            figures.cancelled += int(cancelled or 0)
    for day, runtime, allowed, denied, escalations in _answers(start, end, runtime_id):
        for figures in targets(day, runtime):
            figures.allowed += int(allowed or 0)
            figures.denied += int(denied or 0)
            figures.escalations += int(escalations or 0)
    for day, runtime, revocations in _revocations(start, end, runtime_id):
        for figures in targets(day, runtime):
            figures.revocations += int(revocations)
    for kind, key, count, median, p90 in _wait_percentiles(start, end, runtime_id, per_runtime):
        if kind == "day":
            figures = report.by_day.get(_as_date(key))
        elif kind == "runtime":
            figures = report.by_runtime.setdefault(int(key), Figures())
        else:
            figures = report.totals
        if figures is not None:
            figures.timed, figures.median_seconds, figures.p90_seconds = count, median, p90
    return report


def _as_date(value: Any) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(str(value))


# --- SQL -------------------------------------------------------------------------------------------
# Plain SQL: grouping by a day expression and the percentile aggregates are not expressible
# in the ORM without per-row Python functions on SQLite (TruncDate), which cost seconds at
# 300,000 requests. Table and column names come from the models; values are parameters.

_REQ = ApprovalRequest._meta.db_table
_GRANT = Grant._meta.db_table
PERSON_ANSWER_ORIGINS = (GrantOrigin.ANSWER, GrantOrigin.ESCALATION)


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


def _requests(start: dt.datetime, end: dt.datetime, runtime_id: int | None) -> list[tuple]:
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


def _answers(start: dt.datetime, end: dt.datetime, runtime_id: int | None) -> list[tuple]:
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


def _revocations(start: dt.datetime, end: dt.datetime, runtime_id: int | None) -> list[tuple]:
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


def _wait_percentiles(
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
    return [(kind, key, int(n), _seconds(median), _seconds(p90)) for kind, key, n, median, p90 in rows if n]


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


def _seconds(value: Any) -> float | None:
    return None if value is None else _round(float(value))


def _round(value: float | None) -> float | None:
    # Millisecond precision: SQLite's julianday arithmetic is good to about 0.1 ms.
    return None if value is None else round(value, 3)


# --- Chart geometry (pure) -------------------------------------------------------------------------

CHART_WIDTH = 400
CHART_HEIGHT = 170
PLOT_LEFT = 44  # room for the y labels
PLOT_RIGHT = 8
PLOT_TOP = 10
PLOT_BOTTOM = 22  # room for the first and last day


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class Tick:
    y: float
    label: str


@dataclass(frozen=True)
class Plot:
    """Where the plot area sits in the chart's viewBox."""

    left: float = PLOT_LEFT
    top: float = PLOT_TOP
    right: float = CHART_WIDTH - PLOT_RIGHT
    bottom: float = CHART_HEIGHT - PLOT_BOTTOM

    @property
    def width(self) -> float:
        return self.right - self.left

    @property
    def height(self) -> float:
        return self.bottom - self.top


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times 10^k at or above `value` (1 for nothing to show)."""
    if value <= 0 or math.isnan(value):
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        candidate = step * 10**exponent
        if candidate >= value * (1 - 1e-12):
            return float(candidate)
    return float(10 ** (exponent + 1))  # pragma: no cover - the loop always returns


def count_ceiling(value: float, ticks: int = 4) -> float:
    """A top for whole counts: `ticks` equal steps of 1, 2 or 5 times 10^k, so every tick
    is a whole number (never "0.25 escalations")."""
    wanted = max(value, 1.0) / ticks
    exponent = max(math.floor(math.log10(wanted)), 0)
    for step in (1, 2, 5, 10):
        if step * 10**exponent >= wanted:
            return float(step * 10**exponent * ticks)
    return float(10 ** (exponent + 1) * ticks)  # pragma: no cover - the loop always returns


def y_of(value: float, top_value: float, plot: Plot) -> float:
    return round(plot.bottom - plot.height * (value / top_value), 2)


def ticks(top_value: float, plot: Plot, label: Any = None, count: int = 4) -> list[Tick]:
    """Evenly spaced y ticks from 0 to `top_value`, labelled with `label(value)`."""
    fmt = label or _number
    return [
        Tick(y_of(top_value * i / count, top_value, plot), fmt(top_value * i / count))
        for i in range(count + 1)
    ]


def slot(index: int, count: int, plot: Plot) -> tuple[float, float]:
    """The x and width of the index-th of `count` equal slots, with a gap between bars."""
    width = plot.width / max(count, 1)
    gap = min(2.0, width * 0.2)
    return round(plot.left + index * width + gap / 2, 2), round(max(width - gap, 0.5), 2)


def bars(values: Sequence[float], top_value: float, plot: Plot = Plot()) -> list[Box | None]:
    """One bar per value (None for zero, so nothing is drawn)."""
    out: list[Box | None] = []
    for index, value in enumerate(values):
        if not value:
            out.append(None)
            continue
        x, width = slot(index, len(values), plot)
        y = y_of(value, top_value, plot)
        out.append(Box(x, y, width, round(plot.bottom - y, 2)))
    return out


def stacked_bars(
    layers: Sequence[Sequence[float]], top_value: float, plot: Plot = Plot()
) -> list[list[Box | None]]:
    """Bars stacked bottom-up, layer by layer: out[layer][index]."""
    count = len(layers[0]) if layers else 0
    base = [0.0] * count
    out: list[list[Box | None]] = []
    for layer in layers:
        boxes: list[Box | None] = []
        for index, value in enumerate(layer):
            if not value:
                boxes.append(None)
                continue
            x, width = slot(index, count, plot)
            y_top = y_of(base[index] + value, top_value, plot)
            y_base = y_of(base[index], top_value, plot)
            boxes.append(Box(x, y_top, width, round(y_base - y_top, 2)))
            base[index] += value
        out.append(boxes)
    return out


def line_path(values: Sequence[float | None], top_value: float, plot: Plot = Plot()) -> str:
    """An SVG path through each slot's centre; a None breaks the line (no data that day)."""
    parts: list[str] = []
    pen_down = False
    for index, value in enumerate(values):
        if value is None:
            pen_down = False
            continue
        x, width = slot(index, len(values), plot)
        point = f"{round(x + width / 2, 2)} {y_of(value, top_value, plot)}"
        parts.append(f"{'L' if pen_down else 'M'}{point}")
        pen_down = True
    return " ".join(parts)


def line_points(
    values: Sequence[float | None], top_value: float, plot: Plot = Plot()
) -> list[tuple[float, float]]:
    """The dots of a line, so a lone day between gaps still shows."""
    out = []
    for index, value in enumerate(values):
        if value is not None:
            x, width = slot(index, len(values), plot)
            out.append((round(x + width / 2, 2), y_of(value, top_value, plot)))
    return out


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"


def duration_label(seconds: float | None) -> str:
    """Seconds as people read them: 45 s, 2.5 min, 1.5 h."""
    if seconds is None:
        return "—"
    if seconds < 90:
        return f"{seconds:.3g} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def count_label(count: float, singular: str, plural: str = "") -> str:
    """A count and its noun, singular for exactly one: "1 request", "0 requests", "2.5 hours"."""
    noun = singular if count == 1 else (plural or f"{singular}s")
    return f"{_number(count)} {noun}"


def percent_label(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def max_of(values: Iterable[float | None]) -> float:
    return max((value for value in values if value is not None), default=0.0)
