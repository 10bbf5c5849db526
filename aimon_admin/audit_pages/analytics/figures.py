"""Decision analytics' figures: what is counted, per day (UTC), per runtime and in total, over
a period of days read from the query string.

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
import re
from dataclasses import dataclass, field
from typing import Any

from aimon_admin.audit_pages.analytics.queries import (
    answer_rows,
    request_rows,
    revocation_rows,
    wait_percentile_rows,
)

PERIOD_DEFAULT = "30d"
PERIOD_CHOICES = ("7d", "30d", "90d")
PERIOD_MAX_DAYS = 366
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

    # Each query's counts (after day and runtime), by the Figures field each adds to.
    counted = (
        (request_rows, ("requests", "answered", "expired", "cancelled")),
        (answer_rows, ("allowed", "denied", "escalations")),
        (revocation_rows, ("revocations",)),
    )
    for rows, fields in counted:
        for day, runtime, *counts in rows(start, end, runtime_id):
            for figures in targets(day, runtime):
                for name, count in zip(fields, counts, strict=True):
                    setattr(figures, name, getattr(figures, name) + int(count or 0))
    for kind, key, count, median, p90 in wait_percentile_rows(start, end, runtime_id, per_runtime):
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
