"""Decision analytics: how runtimes' approval requests fare, per day and per runtime.

Three modules, none with views or templates (the page is aimon_admin.audit_pages.analytics_views):

* figures: what is counted and the period it is counted over (`decision_report`);
* queries: the SQL that counts it, one pass per table;
* charts: those numbers as coordinates for server-drawn SVG, pure functions.

What they offer is named here, so a caller reads `analytics.decision_report`, `analytics.bars`.
"""

from __future__ import annotations

from aimon_admin.audit_pages.analytics.charts import (
    CHART_HEIGHT,
    CHART_WIDTH,
    Box,
    Plot,
    Tick,
    bars,
    count_ceiling,
    count_label,
    duration_label,
    line_path,
    line_points,
    max_of,
    nice_ceiling,
    percent_label,
    stacked_bars,
    ticks,
)
from aimon_admin.audit_pages.analytics.figures import (
    PERIOD_CHOICES,
    PERIOD_DEFAULT,
    PERIOD_MAX_DAYS,
    PERIOD_PROBLEM,
    RUNTIME_ROWS_SHOWN,
    AnalyticsInputError,
    Figures,
    Report,
    decision_report,
    parse_period,
)
from aimon_admin.audit_pages.analytics.queries import percentile_from_ranks

__all__ = [
    "CHART_HEIGHT",
    "CHART_WIDTH",
    "PERIOD_CHOICES",
    "PERIOD_DEFAULT",
    "PERIOD_MAX_DAYS",
    "PERIOD_PROBLEM",
    "RUNTIME_ROWS_SHOWN",
    "AnalyticsInputError",
    "Box",
    "Figures",
    "Plot",
    "Report",
    "Tick",
    "bars",
    "count_ceiling",
    "count_label",
    "decision_report",
    "duration_label",
    "line_path",
    "line_points",
    "max_of",
    "nice_ceiling",
    "parse_period",
    "percent_label",
    "percentile_from_ranks",
    "stacked_bars",
    "ticks",
]
