"""The daily analytics table folds days without a decision (a 30-day view once listed 30
all-zero rows): one row per run of quiet days, saying how many; the charts keep every day."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.audit_pages.analytics.figures import Figures
from aimon_admin.audit_pages.analytics_views import QUIET_ONE, QuietDays, table_rows

DAY = dt.date(2026, 11, 1)


def series(*busy: int, days: int = 10) -> list[tuple[dt.date, Figures]]:
    """`days` days from DAY; the given offsets had a request."""
    return [
        (DAY + dt.timedelta(days=i), Figures(requests=1) if i in busy else Figures()) for i in range(days)
    ]


def shape(rows: list) -> list:
    return [
        (row.first.day, row.last.day, row.days) if isinstance(row, QuietDays) else row["day"].day
        for row in rows
    ]


@pytest.mark.parametrize(
    ("busy", "expected"),
    [
        ((), [(1, 10, 10)]),
        ((0, 9), [1, (2, 9, 8), 10]),
        ((3, 5), [(1, 3, 3), 4, (5, 5, 1), 6, (7, 10, 4)]),
        (tuple(range(10)), list(range(1, 11))),
    ],
    ids=["all quiet", "quiet middle", "two busy days", "no quiet day"],
)
def test_runs_of_quiet_days_become_one_row_each(busy: tuple[int, ...], expected: list) -> None:
    assert shape(table_rows(series(*busy))) == expected


@pytest.mark.parametrize(
    "figures",
    [
        Figures(requests=1),
        Figures(allowed=1),
        Figures(denied=1),
        Figures(escalations=1),
        Figures(revocations=1),
    ],
    ids=["a request", "an allow", "a deny", "an escalation", "a revocation"],
)
def test_any_decision_makes_a_day_busy(figures: Figures) -> None:
    # An answer, escalation or revocation counts on its own day, even with no request opened.
    assert not figures.quiet
    assert Figures().quiet


def test_quiet_rows_say_how_many_days() -> None:
    one, five = QuietDays(DAY, DAY, 1), QuietDays(DAY, DAY + dt.timedelta(days=4), 5)
    assert one.text == QUIET_ONE == "No decisions that day."
    assert five.text == "No decisions on these 5 days."


@pytest.mark.django_db
def test_a_quiet_month_is_one_row_and_still_thirty_bars(auditor: User) -> None:
    client = Client()
    client.force_login(auditor)
    html = client.get("/audit/analytics/", {"period": "30d"}).content.decode()
    body = re.search(r'<table class="analytics-table">.*?<tbody>(.*?)</tbody>', html, re.S)
    assert body is not None
    rows = re.findall(r"<tr[^>]*>.*?</tr>", body.group(1), re.S)
    assert len(rows) == 1
    assert 'class="analytics-quiet"' in rows[0]
    assert "No decisions on these 30 days." in rows[0]
    assert re.search(r"<th scope=\"row\">\d{4}-\d\d-\d\d to \d{4}-\d\d-\d\d</th>", rows[0])
    chart = re.search(r'<figure class="card analytics-chart" id="chart-requests">.*?</figure>', html, re.S)
    assert chart is not None  # the chart still draws the whole period, axis to axis
