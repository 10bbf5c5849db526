"""Decision analytics: exact figures from known requests, on SQLite and PostgreSQL alike.

Requests, answers, aborts, escalations and revocations are made through the approval
services; only their timestamps are then moved onto known days with queryset updates
on the approval rows (the services stamp "now").
"""

from __future__ import annotations

import datetime as dt
import random
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.test import Client
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer, GrantOrigin
from aimon_admin.approvals.models import ApprovalRequest, Grant
from aimon_admin.approvals.services import (
    RequestInput,
    grant_revoke,
    request_answer,
    request_cancel,
    request_create,
    request_expire_if_due,
    session_clear,
)
from aimon_admin.audit_pages.analytics.charts import (
    Box,
    Plot,
    bars,
    count_ceiling,
    count_label,
    duration_label,
    line_path,
    line_points,
    nice_ceiling,
    stacked_bars,
    ticks,
)
from aimon_admin.audit_pages.analytics.figures import (
    PERIOD_MAX_DAYS,
    PERIOD_PROBLEM,
    AnalyticsInputError,
    Figures,
    decision_report,
    parse_period,
)
from aimon_admin.audit_pages.analytics.queries import percentile_from_ranks
from aimon_admin.audit_pages.analytics_views import BAD_INPUT_MESSAGE, UNKNOWN_RUNTIME, QuietDays
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime

URL = "/audit/analytics/"


def at(day: dt.date, hour: int = 10, minute: int = 0) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(hour, minute), tzinfo=dt.UTC)


def place(request: ApprovalRequest, created: dt.datetime, wait_seconds: float | None = None) -> None:
    """Move a request onto a known day, and its answer (with the grants people's answers
    wrote) `wait_seconds` later."""
    fields: dict[str, object] = {"created_at": created}
    if wait_seconds is not None:
        answered = created + dt.timedelta(seconds=wait_seconds)
        fields["answered_at"] = answered
        Grant.objects.filter(request=request, origin__in=[GrantOrigin.ANSWER, GrantOrigin.ESCALATION]).update(
            created_at=answered
        )
    ApprovalRequest.objects.filter(pk=request.pk).update(**fields)


def open_request(runtime: AgentRuntime, skills: list[str], **fields: object) -> ApprovalRequest:
    request, created = request_create(RequestInput(runtime=runtime, skills=skills, **fields))  # type: ignore[arg-type]
    assert created
    return request


@dataclass
class Known:
    today: dt.date
    d0: dt.date
    d1: dt.date
    runtime: AgentRuntime
    other_runtime: AgentRuntime


@pytest.fixture
def known(runtime: AgentRuntime, other_runtime: AgentRuntime, approver: User, operator: User) -> Known:
    """Runtime agent-one: on d0 four requests alice answered (waits 10, 20, 40, 100 s; three
    skills allowed, two denied) and one that expired; on d1 a session-less request the
    operator answered "for this session" (escalated, wait 300 s), one cancelled, one pending
    and one the chain decided at once; ten days ago one answered (wait 1000 s). Agent-two:
    on d0 one allowed (wait 7 s). Then, on d1, the escalated grant is revoked on its own, and
    today session s-1 is cleared (its eight grants)."""
    today = timezone.now().date()
    d0, d1 = today - dt.timedelta(days=2), today - dt.timedelta(days=1)
    alice = {"session_id": "s-1", "principal": "alice"}

    answers = [
        (["a1"], [Answer.ALLOW_SESSION], 10),
        (["a2"], [Answer.DENY], 20),
        (["a3"], [Answer.ALLOW_SESSION], 40),
        (["a4x", "a4y"], [Answer.ALLOW_SESSION, Answer.DENY], 100),
    ]
    for minute, (skills, replies, wait) in enumerate(answers):
        request = open_request(runtime, skills, **alice)
        for skill, reply in zip(skills, replies, strict=True):
            request_answer(request=request, user=approver, answer=reply, skills=[skill])
        place(request, at(d0, 10, minute), wait)

    expired = open_request(runtime, ["e1"], **alice)
    ApprovalRequest.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    expired.refresh_from_db()
    assert request_expire_if_due(expired)
    place(expired, at(d0, 11))

    escalated = open_request(runtime, ["esc"])
    request_answer(request=escalated, user=operator, answer=Answer.ALLOW_SESSION)
    place(escalated, at(d1, 9), 300)
    grant = Grant.objects.get(skill="esc", origin=GrantOrigin.ESCALATION)
    Grant.objects.filter(pk=grant.pk).update(created_at=at(d1, 9, 5))
    assert grant_revoke(grant=grant, actor=Actor.for_user(operator))
    Grant.objects.filter(pk=grant.pk).update(revoked_at=at(d1, 15))

    cancelled = open_request(runtime, ["c1"], **alice)
    request_cancel(request=cancelled, actor=Actor.for_runtime(runtime))
    place(cancelled, at(d1, 10))
    place(open_request(runtime, ["p1"], **alice), at(d1, 11))
    decided = open_request(runtime, ["a1"], **alice)  # s-1 already allows a1: answered at once
    assert decided.status == "ANSWERED"
    assert decided.answered_by is None
    place(decided, at(d1, 12), 0)

    old = open_request(runtime, ["old"], **alice)
    request_answer(request=old, user=approver, answer=Answer.ALLOW_SESSION)
    place(old, at(today - dt.timedelta(days=10)), 1000)

    other = open_request(other_runtime, ["b1"], session_id="s-b", principal="alice")
    request_answer(request=other, user=approver, answer=Answer.ALLOW_SESSION)
    place(other, at(d0, 13), 7)

    assert session_clear(runtime=runtime, session_id="s-1", actor=Actor.for_runtime(runtime)) == 8
    return Known(today=today, d0=d0, d1=d1, runtime=runtime, other_runtime=other_runtime)


def figures(f: Figures) -> tuple:
    return (
        f.requests,
        f.answered,
        f.expired,
        f.cancelled,
        f.pending,
        f.allowed,
        f.denied,
        f.timed,
        f.median_seconds,
        f.p90_seconds,
        f.escalations,
        f.revocations,
    )


EMPTY = (0, 0, 0, 0, 0, 0, 0, 0, None, None, 0, 0)


# --- The figures --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_daily_figures_for_all_runtimes_are_exact(known: Known) -> None:
    report = decision_report(today=known.today, days=7, runtime_id=None)

    assert report.days[0] == known.today - dt.timedelta(days=6)
    assert report.days[-1] == known.today
    by_day = {day: figures(f) for day, f in report.series()}
    # d0: agent-one's five (four answered, one expired) and agent-two's one. Waits 7, 10,
    # 20, 40, 100: median 20, p90 = 40 + 0.6 * (100 - 40) = 76.
    assert by_day[known.d0] == (6, 5, 1, 0, 0, 4, 2, 5, 20.0, 76.0, 0, 0)
    # d1: the escalation (the only wait a person made: 300 s), the cancelled, the pending,
    # the one the chain answered (no person, so no wait and no approval counted).
    assert by_day[known.d1] == (4, 2, 0, 1, 1, 1, 0, 1, 300.0, 300.0, 1, 1)
    # Today: the clear of s-1 removed eight grants (answers, the old one and the two
    # abort-denies); the escalated grant revoked on d1 was not in the session. Nothing else.
    today = by_day.pop(known.today)
    assert today[:10] == EMPTY[:10]
    assert today[10:] == (0, 8)
    for day in (known.d0, known.d1):
        by_day.pop(day)
    assert set(by_day.values()) == {EMPTY}
    # The request from ten days ago is outside seven days.
    assert figures(report.totals) == (10, 7, 1, 1, 1, 5, 2, 6, 30.0, 200.0, 1, 9)


@pytest.mark.django_db
def test_one_runtimes_figures_leave_the_others_out(known: Known) -> None:
    report = decision_report(today=known.today, days=7, runtime_id=known.runtime.pk, per_runtime=False)

    # d0 without agent-two's 7 s: waits 10, 20, 40, 100 → median 30, p90 40 + 0.7 * 60 = 82.
    assert figures(report.by_day[known.d0]) == (5, 4, 1, 0, 0, 3, 2, 4, 30.0, 82.0, 0, 0)
    assert report.by_day[known.d0].approval_rate == pytest.approx(0.6)
    # Whole week: waits 10, 20, 40, 100, 300 → median 40, p90 100 + 0.6 * 200 = 220.
    assert figures(report.totals) == (9, 6, 1, 1, 1, 4, 2, 5, 40.0, 220.0, 1, 9)
    assert report.by_runtime == {}


@pytest.mark.django_db
def test_per_runtime_figures_over_the_period(known: Known) -> None:
    report = decision_report(today=known.today, days=7, runtime_id=None)

    assert figures(report.by_runtime[known.runtime.pk]) == (9, 6, 1, 1, 1, 4, 2, 5, 40.0, 220.0, 1, 9)
    assert figures(report.by_runtime[known.other_runtime.pk]) == (1, 1, 0, 0, 0, 1, 0, 1, 7.0, 7.0, 0, 0)


@pytest.mark.django_db
def test_a_longer_period_takes_in_older_requests(known: Known) -> None:
    report = decision_report(today=known.today, days=30, runtime_id=known.runtime.pk)

    assert len(report.days) == 30
    # Waits 10, 20, 40, 100, 300, 1000: median 70, p90 300 + 0.5 * 700 = 650.
    assert figures(report.totals) == (10, 7, 1, 1, 1, 5, 2, 6, 70.0, 650.0, 1, 9)


@pytest.mark.django_db
def test_percentiles_match_percentile_cont_on_random_waits(runtime: AgentRuntime, approver: User) -> None:
    # median and p90 as percentile_cont defines them (linear between the two nearest ranks),
    # checked against Python on both databases (PostgreSQL: percentile_cont itself; SQLite:
    # the ordered window).
    rng = random.Random(5)  # noqa: S311 - test data, not secrets
    today = timezone.now().date()
    waits: dict[dt.date, list[float]] = {}
    for number in range(23):
        day = today - dt.timedelta(days=number % 3)
        wait = round(rng.uniform(0.5, 5000), 3)
        request = open_request(runtime, [f"k{number}"], session_id=f"s{number}", principal="alice")
        request_answer(request=request, user=approver, answer=Answer.DENY)
        place(request, at(day, 1 + number % 20, number), wait)
        waits.setdefault(day, []).append(wait)

    report = decision_report(today=today, days=3, runtime_id=None)

    for day, values in waits.items():
        expected = statistics.quantiles(values, n=10, method="inclusive")
        figures_of_day = report.by_day[day]
        assert figures_of_day.timed == len(values)
        assert figures_of_day.median_seconds == pytest.approx(statistics.median(values), abs=0.002)
        assert figures_of_day.p90_seconds == pytest.approx(expected[8], abs=0.002)
        assert figures_of_day.approval_rate == 0.0


@pytest.mark.django_db
def test_nothing_to_count_gives_empty_figures(runtime: AgentRuntime) -> None:
    report = decision_report(today=dt.date(2020, 2, 28), days=2, runtime_id=None)

    assert report.days == [dt.date(2020, 2, 27), dt.date(2020, 2, 28)]
    assert [figures(f) for _, f in report.series()] == [EMPTY, EMPTY]
    assert figures(report.totals) == EMPTY
    assert report.by_runtime == {}
    assert report.totals.approval_rate is None


# --- Reading the query string (no database) -----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "days"),
    [(None, 30), ("", 30), ("7d", 7), ("30d", 30), ("90d", 90), (" 14d ", 14), ("366d", 366)],
)
def test_period_reads_days(value: str | None, days: int) -> None:
    assert parse_period(value) == days


@pytest.mark.parametrize("value", ["0d", "30", "d", "7w", "-7d", "367d", "1000d", "7.5d", "\uff17d"])
def test_period_refuses_anything_else_naming_the_field(value: str) -> None:
    with pytest.raises(AnalyticsInputError) as caught:
        parse_period(value)
    assert caught.value.field == "period"


# --- Chart geometry (pure) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ceiling"),
    [
        (0, 1),
        (-3, 1),
        (0.3, 0.5),
        (1, 1),
        (1.2, 2),
        (2.2, 2.5),
        (3, 5),
        (7, 10),
        (10, 10),
        (11, 20),
        (240, 250),
        (999, 1000),
    ],
)
def test_nice_ceiling(value: float, ceiling: float) -> None:
    assert nice_ceiling(value) == pytest.approx(ceiling)


@pytest.mark.parametrize(
    ("value", "top"),
    [(0, 4), (1, 4), (4, 4), (5, 8), (6, 8), (9, 20), (10, 20), (40, 40), (41, 80), (399, 400)],
)
def test_count_ceiling_keeps_every_tick_a_whole_number(value: float, top: float) -> None:
    assert count_ceiling(value) == top
    assert all((top * i / 4).is_integer() for i in range(5))


def test_bars_fill_their_slots_and_stand_on_the_baseline() -> None:
    plot = Plot(left=0, top=0, right=100, bottom=50)
    boxes = bars([10, 0, 5, 2.5], 10, plot)

    assert boxes[1] is None
    assert boxes[0] == Box(1.0, 0.0, 23.0, 50.0)
    assert boxes[2] == Box(51.0, 25.0, 23.0, 25.0)
    assert boxes[3] == Box(76.0, 37.5, 23.0, 12.5)


def test_stacked_bars_sit_on_each_other() -> None:
    plot = Plot(left=0, top=0, right=20, bottom=100)
    lower, upper = stacked_bars([[20, 0], [30, 50]], 100, plot)

    assert lower[0] == Box(1.0, 80.0, 8.0, 20.0)
    assert upper[0] == Box(1.0, 50.0, 8.0, 30.0)
    assert lower[1] is None
    assert upper[1] == Box(11.0, 50.0, 8.0, 50.0)


def test_a_line_breaks_where_a_day_has_no_value() -> None:
    plot = Plot(left=0, top=0, right=40, bottom=100)
    path = line_path([50, None, 100, 0], 100, plot)

    assert path == "M5.0 50.0 M25.0 0.0 L35.0 100.0"
    assert line_points([None, 25], 100, plot) == [(30.0, 75.0)]


def test_ticks_run_from_zero_to_the_top() -> None:
    plot = Plot(left=0, top=0, right=10, bottom=80)
    assert [(t.y, t.label) for t in ticks(20, plot)] == [
        (80.0, "0"),
        (60.0, "5"),
        (40.0, "10"),
        (20.0, "15"),
        (0.0, "20"),
    ]


@pytest.mark.parametrize(
    ("seconds", "text"), [(None, "—"), (7, "7 s"), (30.5, "30.5 s"), (150, "2.5 min"), (5400, "1.5 h")]
)
def test_durations_read_as_people_read_them(seconds: float | None, text: str) -> None:
    assert duration_label(seconds) == text


@pytest.mark.parametrize(
    ("count", "singular", "plural", "text"),
    [
        (0, "request", "", "0 requests"),
        (1, "request", "", "1 request"),
        (1.0, "escalation", "", "1 escalation"),
        (2, "revocation", "", "2 revocations"),
        (1.5, "request", "", "1.5 requests"),
        (1, "person", "people", "1 person"),
        (3, "person", "people", "3 people"),
    ],
)
def test_counts_take_the_singular_only_for_exactly_one(
    count: float, singular: str, plural: str, text: str
) -> None:
    assert count_label(count, singular, plural) == text


def test_percentile_from_ranks_interpolates_like_percentile_cont() -> None:
    assert percentile_from_ranks({1: 20.0, 2: 40.0}, 4, 0.5) == 30.0
    assert percentile_from_ranks({0: 9.0}, 1, 0.9) == 9.0
    assert percentile_from_ranks({}, 0, 0.5) is None


# --- The page -------------------------------------------------------------------------------------


@pytest.fixture
def signed_in(client: Client) -> Callable[[User], Client]:
    def sign_in(user: User) -> Client:
        client.force_login(user)
        return client

    return sign_in


@pytest.mark.django_db
def test_anonymous_is_sent_to_sign_in(client: Client) -> None:
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
def test_an_approver_is_refused(signed_in: Callable[[User], Client], approver: User) -> None:
    assert signed_in(approver).get(URL).status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["auditor", "operator"])
def test_auditors_and_operators_read_it_and_cannot_post(
    signed_in: Callable[[User], Client], request: pytest.FixtureRequest, role: str
) -> None:
    client = signed_in(request.getfixturevalue(role))
    assert client.get(URL).status_code == 200
    assert client.post(URL).status_code == 405


@pytest.mark.django_db
def test_the_page_draws_each_chart_with_a_title_a_description_and_the_table(
    signed_in: Callable[[User], Client], auditor: User, known: Known
) -> None:
    response = signed_in(auditor).get(URL, {"period": "7d"})

    assert response.status_code == 200
    html = response.content.decode()
    for slug in ("requests", "approval", "wait", "escalations", "revocations"):
        assert f'aria-labelledby="chart-{slug}-title chart-{slug}-desc"' in html
        assert f'<title id="chart-{slug}-title">' in html
        assert f'<desc id="chart-{slug}-desc">' in html
    assert "10 requests from" in html
    assert "median 30 s, 90th percentile 3.33 min" in html
    d0 = re.search(rf"<tr><th scope=\"row\" class=\"nowrap\">{known.d0.isoformat()}</th>(.*?)</tr>", html)
    assert d0 is not None
    assert re.findall(r"<td>(.*?)</td>", d0.group(1)) == [
        "6",
        "5",
        "1",
        "0",
        "0",
        "67%",
        "20 s",
        "76 s",
        "0",
        "0",
    ]
    one = re.search(r'<tr data-runtime="agent-one">(.*?)</tr>', html)
    assert one is not None
    assert re.findall(r"<td>(.*?)</td>", one.group(1)) == ["9", "67%", "40 s", "3.67 min", "1", "1", "9"]
    assert 'href="/audit/analytics/?runtime=agent-one&amp;period=7d"' in html
    assert "http://" not in html.replace("http://www.w3.org", "")  # nothing fetched from elsewhere


@pytest.mark.django_db
def test_one_runtime_over_the_default_thirty_days(
    signed_in: Callable[[User], Client], operator: User, known: Known
) -> None:
    response = signed_in(operator).get(URL, {"runtime": "agent-one"})

    assert response.status_code == 200
    # Each run of days without a decision is one row; the rows still cover 30 days.
    shape = [row.days if isinstance(row, QuietDays) else row["day"] for row in response.context["rows"]]
    ten_days_ago = known.today - dt.timedelta(days=10)
    assert shape == [19, ten_days_ago, 7, known.d0, known.d1, known.today]
    assert figures(response.context["report"].totals) == (10, 7, 1, 1, 1, 5, 2, 6, 70.0, 650.0, 1, 9)
    assert response.context["runtime_rows"] == []
    assert b"Runtime <strong>agent-one</strong>" in response.content


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "field"), [({"period": "forever"}, "period"), ({"runtime": "nobody"}, "runtime")]
)
def test_a_value_that_cannot_be_read_is_a_400_naming_it(
    signed_in: Callable[[User], Client], auditor: User, query: dict[str, str], field: str
) -> None:
    response = signed_in(auditor).get(URL, query)

    assert response.status_code == 400
    problem = UNKNOWN_RUNTIME if field == "runtime" else PERIOD_PROBLEM.format(max=PERIOD_MAX_DAYS)
    assert BAD_INPUT_MESSAGE.format(field=field, problem=problem) in response.content.decode().replace(
        "&#x27;", "'"
    )
    assert "<svg" not in response.content.decode()


# --- Indexes ---------------------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_weeks_queries_can_each_be_answered_from_a_period_index(runtime: AgentRuntime) -> None:
    # Pages must stay fast at a million rows: every query of a 7-day report reads its period
    # through an index (request_created, grant_created, grant_revoked) rather than the whole
    # table. With sequential scans priced out, a query no index serves still shows a Seq Scan.
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        decision_report(today=timezone.now().date(), days=7, runtime_id=None)
    plans = []
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for query in captured.captured_queries:
            cursor.execute(f"EXPLAIN {query['sql']}")
            plans.append("\n".join(row[0] for row in cursor.fetchall()))

    assert len(plans) == 4
    assert ["Seq Scan" in plan for plan in plans] == [False] * 4, plans
    used = [set(re.findall(r"(?:Index Scan using|Bitmap Index Scan on) (\w+)", plan)) for plan in plans]
    assert used[:3] == [{"request_created"}, {"grant_created"}, {"grant_revoked"}], used
    # The fourth (the requests again, by how they ended): on a table this small the planner
    # may pick the (status, expires_at) index instead; an index either way, never a scan.
    assert used[3], plans
    assert used[3] <= {"request_created", "request_status_expiry"}, used
