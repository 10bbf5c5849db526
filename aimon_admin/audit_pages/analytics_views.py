"""Decision analytics per runtime and over time (requests, answers, escalations).

One read-only page, GET only, for whoever holds `audit.view_auditevent` (auditors and
operators). The query string holds the choice (`runtime`, `period`), so a view can be
shared as a link; a value that cannot be read is a 400 naming it. Charts are SVG drawn
here, on the server, from the figures in `aimon_admin.audit_pages.analytics`, with the same
figures as a table beneath them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path
from django.utils import timezone

from aimon_admin.audit_pages.analytics import charts
from aimon_admin.audit_pages.analytics.figures import (
    PERIOD_CHOICES,
    PERIOD_DEFAULT,
    RUNTIME_ROWS_SHOWN,
    AnalyticsInputError,
    Figures,
    Report,
    decision_report,
    parse_period,
)
from aimon_admin.audit_pages.page import auditor_page
from aimon_admin.core.plurals import counted
from aimon_admin.runtimes.models import AgentRuntime

TEMPLATE = "audit/analytics.html"
# Messages users see (tests import these).
UNKNOWN_RUNTIME = "names no runtime"
BAD_INPUT_MESSAGE = "The value of '{field}' {problem}."
QUIET_ONE = "No decisions that day."
QUIET_MANY = ("No decisions on this {count} day.", "No decisions on these {count} days.")


@dataclass
class Series:
    key: str  # CSS class suffix and legend key
    label: str
    boxes: list[tuple[charts.Box, str]] = field(default_factory=list)
    path: str = ""
    points: list[tuple[float, float, str]] = field(default_factory=list)


@dataclass
class Chart:
    slug: str
    title: str
    desc: str
    ticks: list[charts.Tick]
    series: list[Series]
    first_day: str
    last_day: str
    plot: charts.Plot = field(default_factory=charts.Plot)
    width: int = charts.CHART_WIDTH
    height: int = charts.CHART_HEIGHT


@dataclass(frozen=True)
class QuietDays:
    """Consecutive days of the table without a decision, shown as one row."""

    first: Any  # dt.date
    last: Any
    days: int
    quiet: bool = True

    @property
    def text(self) -> str:
        return QUIET_ONE if self.days == 1 else counted(QUIET_MANY, self.days)


def table_rows(series: list[tuple[Any, Figures]]) -> list[dict[str, Any] | QuietDays]:
    """The daily table: a row per day with a decision, one row per run of quiet days."""
    rows: list[dict[str, Any] | QuietDays] = []
    for day, figures in series:
        last = rows[-1] if rows else None
        if not figures.quiet:
            rows.append(_row(day, figures))
        elif isinstance(last, QuietDays):
            rows[-1] = QuietDays(last.first, day, last.days + 1)
        else:
            rows.append(QuietDays(day, day, 1))
    return rows


@auditor_page
def analytics_view(request: HttpRequest) -> HttpResponse:
    runtime_name = (request.GET.get("runtime") or "").strip()
    context: dict[str, Any] = {
        "runtime_names": list(AgentRuntime.objects.order_by("name").values_list("name", flat=True)),
        "period_choices": PERIOD_CHOICES,
        "period": (request.GET.get("period") or "").strip() or PERIOD_DEFAULT,
        "runtime_name": runtime_name,
    }
    try:
        days = parse_period(request.GET.get("period"))
        runtime = AgentRuntime.objects.filter(name=runtime_name).first() if runtime_name else None
        if runtime_name and runtime is None:
            raise AnalyticsInputError("runtime", UNKNOWN_RUNTIME)
    except AnalyticsInputError as error:
        context["error"] = BAD_INPUT_MESSAGE.format(field=error.field, problem=error.problem)
        context["error_field"] = error.field
        return render(request, TEMPLATE, context, status=400)

    report = decision_report(
        today=timezone.now().date(),
        days=days,
        runtime_id=runtime.pk if runtime else None,
        per_runtime=runtime is None,
    )
    context.update(
        runtime=runtime,
        days=days,
        report=report,
        rows=table_rows(report.series()),
        totals=_row(None, report.totals),
        charts=_charts(report, runtime),
        runtime_rows=_runtime_rows(report) if runtime is None else [],
    )
    return render(request, TEMPLATE, context)


def _row(day: Any, figures: Figures) -> dict[str, Any]:
    return {
        "day": day,
        "figures": figures,
        "approval_rate": charts.percent_label(figures.approval_rate),
        "median": charts.duration_label(figures.median_seconds),
        "p90": charts.duration_label(figures.p90_seconds),
    }


def _runtime_rows(report: Report) -> list[dict[str, Any]]:
    names = dict(AgentRuntime.objects.filter(pk__in=list(report.by_runtime)).values_list("pk", "name"))
    ranked = sorted(report.by_runtime.items(), key=lambda item: (-item[1].requests, names.get(item[0], "")))
    return [
        {"name": names.get(pk, f"#{pk}"), **_row(None, figures)}
        for pk, figures in ranked[:RUNTIME_ROWS_SHOWN]
    ]


def _charts(report: Report, runtime: AgentRuntime | None) -> list[Chart]:
    series = report.series()
    labels = [day.isoformat() for day, _ in series]
    figures = [f for _, f in series]
    who = f"runtime {runtime.name}" if runtime else "all runtimes"
    span = f"{labels[0]} to {labels[-1]}"
    totals = report.totals
    plot = charts.Plot()

    def chart(slug: str, title: str, desc: str, top: float, lines: list[Series], label: Any = None) -> Chart:
        ticks = charts.ticks(top, plot, label)
        return Chart(slug, f"{title} per day, {who}", desc, ticks, lines, labels[0], labels[-1])

    def bar_series(
        key: str, label: str, values: list[float], boxes: list[charts.Box | None], noun: str = ""
    ) -> Series:
        # `noun` (singular) for counts of things; without it the label is an adjective ("3 expired").
        def text(value: float) -> str:
            return charts.count_label(value, noun) if noun else f"{value:g} {label.lower()}"

        return Series(
            key, label, boxes=[(box, f"{labels[i]}: {text(values[i])}") for i, box in enumerate(boxes) if box]
        )

    def line(key: str, label: str, values: list[float | None], top: float, fmt: Any) -> Series:
        points = charts.line_points(values, top, plot)
        shown = [(labels[i], value) for i, value in enumerate(values) if value is not None]
        return Series(
            key,
            label,
            path=charts.line_path(values, top, plot),
            points=[
                (x, y, f"{day}: {fmt(value)}") for (x, y), (day, value) in zip(points, shown, strict=True)
            ],
        )

    def count_chart(slug: str, title: str, noun: str, note: str) -> Chart:
        """Bars of one count (a Figures field named `slug`)."""
        values = [float(getattr(f, slug)) for f in figures]
        top = charts.count_ceiling(charts.max_of(values))
        desc = f"{charts.count_label(getattr(totals, slug), noun)} from {span}. {note}"
        return chart(
            slug, title, desc, top, [bar_series(slug, title, values, charts.bars(values, top, plot), noun)]
        )

    # 1. Requests, stacked by how they ended.
    layers = [
        ("answered", "Answered", [float(f.answered) for f in figures]),
        ("expired", "Expired", [float(f.expired) for f in figures]),
        ("other", "Cancelled or pending", [float(f.cancelled + f.pending) for f in figures]),
    ]
    top = charts.count_ceiling(charts.max_of(float(f.requests) for f in figures))
    stacked = charts.stacked_bars([values for _, _, values in layers], top, plot)
    busiest = max(series, key=lambda item: item[1].requests)
    requests_chart = chart(
        "requests",
        "Requests",
        (
            f"{charts.count_label(totals.requests, 'request')} from {span}: {totals.answered} answered, "
            f"{totals.expired} "
            f"expired, {totals.cancelled} cancelled, {totals.pending} still pending. "
            + (
                f"Busiest day {busiest[0].isoformat()} with {busiest[1].requests}."
                if busiest[1].requests
                else "No requests."
            )
        ),
        top,
        [bar_series(key, label, values, stacked[i]) for i, (key, label, values) in enumerate(layers)],
    )

    # 2. Approval rate.
    rates = [None if f.approval_rate is None else f.approval_rate * 100 for f in figures]
    rate_chart = chart(
        "approval",
        "Approval rate",
        (
            f"Of the skills people answered from {span}, {charts.percent_label(totals.approval_rate)} "
            f"were allowed ({totals.allowed} allowed, {totals.denied} denied). Days without answers "
            "leave a gap."
        ),
        100.0,
        [line("rate", "Allowed share", rates, 100.0, lambda v: f"{v:.0f}%")],
        lambda v: f"{v:.0f}%",
    )

    # 3. Time to answer: median and p90.
    medians = [f.median_seconds for f in figures]
    p90s = [f.p90_seconds for f in figures]
    top = charts.nice_ceiling(charts.max_of([*medians, *p90s]))
    wait_chart = chart(
        "wait",
        "Time to answer",
        (
            f"For the {charts.count_label(totals.timed, 'request')} a person answered from {span}: median "
            f"{charts.duration_label(totals.median_seconds)}, 90th percentile "
            f"{charts.duration_label(totals.p90_seconds)}."
        ),
        top,
        [
            line("median", "Median", medians, top, charts.duration_label),
            line("p90", "90th percentile", p90s, top, charts.duration_label),
        ],
        charts.duration_label,
    )
    escalations = count_chart(
        "escalations",
        "Escalations",
        "escalation",
        "Each is a session answer written agent-wide: every session, no expiry, survives clear.",
    )
    revocations = count_chart(
        "revocations",
        "Revocations",
        "revocation",
        "Grants cleared or revoked, counted on the day they were removed.",
    )
    return [requests_chart, rate_chart, wait_chart, escalations, revocations]


urlpatterns: list[URLPattern] = [path("analytics/", analytics_view, name="analytics")]
