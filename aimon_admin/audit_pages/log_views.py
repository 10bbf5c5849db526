"""The filtered log, newest first, a keyset page at a time; htmx swaps only the results."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path, reverse
from django.utils.cache import patch_vary_headers
from django_htmx.http import push_url

from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.filters import LOG_FIELDS, FilterError, LogFilters, parse_cursor, parse_filters
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit_pages import selectors
from aimon_admin.audit_pages.filter_form import (
    LABELS,
    FilterField,
    filter_message,
    first_value,
    problem_for,
    time_field,
)
from aimon_admin.audit_pages.page import auditor_page, url_with

# The log's action labels, read once: get_action_display() walks every choice on each call,
# twice per row, and a page of the log is in the hot path of an auditor's day.
ACTION_LABELS = dict(AuditAction.choices)
LEVEL_LABELS = dict(AuditLevel.choices)
NONE_SHOWN = "—"


@dataclass(frozen=True)
class LogRow:
    """One line of the log, every text it shows worked out once (each is shown twice: in
    the cell, cut to fit, and whole in its title)."""

    seq: int
    created_at: dt.datetime
    level: str
    level_label: str
    action: str
    actor: str
    channel: str
    runtime: str
    session: str
    subject: str

    @classmethod
    def of(cls, event: AuditEvent) -> LogRow:
        return cls(
            seq=event.seq,
            created_at=event.created_at,
            level=event.level,
            level_label=LEVEL_LABELS.get(event.level, event.level),
            action=ACTION_LABELS.get(event.action, event.action),
            actor=event.actor_label,
            channel=event.channel.lower(),
            runtime=event.runtime.name if event.runtime is not None else NONE_SHOWN,
            session=event.session_key or NONE_SHOWN,
            subject=event.subject or NONE_SHOWN,
        )


def _log_context(filters: LogFilters, page: selectors.Page[AuditEvent], before: int | None) -> dict[str, Any]:
    query = filters.querystring()
    return {
        "filters": filters,
        "events": [LogRow.of(event) for event in page.rows],
        "paged": before is not None,
        "before": before,
        "newest_url": url_with("audit:log", query),
        "older_url": (
            url_with("audit:log", filters.querystring(before=page.older_cursor)) if page.older_cursor else ""
        ),
        "csv_url": url_with("audit:export-csv", query),
        "jsonl_url": url_with("audit:export-jsonl", query),
        "event_url": reverse("audit:event", args=[0]).removesuffix("0/"),
    }


# The log's text filters: (name, placeholder).
TEXT_FILTERS = (("actor", "username or runtime:name"), ("runtime", ""), ("session", ""), ("subject", ""))


def _form_context(params: Mapping[str, list[str]], error: FilterError | None = None) -> dict[str, Any]:
    """The filter form as typed (also when a value cannot be read), with the error beside
    the field it is about."""

    actions = {value.strip() for value in params.get("action", ())}
    return {
        "action_choices": [
            {"value": value, "label": label, "selected": value in actions}
            for value, label in AuditAction.choices
        ],
        "action_error": problem_for(error, "action"),
        "level_choices": AuditLevel.choices,
        "level": first_value(params, "level"),
        "level_error": problem_for(error, "level"),
        "text_fields": [
            FilterField(
                name,
                LABELS[name],
                first_value(params, name),
                placeholder=placeholder,
                error=problem_for(error, name),
            )
            for name, placeholder in TEXT_FILTERS
        ],
        "time_fields": [
            time_field(name, first_value(params, name), end=name == "until", error=error)
            for name in ("since", "until")
        ],
    }


@auditor_page
def log_view(request: HttpRequest) -> HttpResponse:
    params = dict(request.GET.lists())
    status, pushed = 200, ""
    try:
        filters = parse_filters(params)
        before = parse_cursor(params)
        page = selectors.event_page(filters=filters, before=before, size=selectors.PAGE_SIZE)
    except FilterError as error:
        # The page as it was asked for, the form kept, the error beside its field; for htmx
        # the results area says it (with 200: htmx 2 does not swap a 4xx).
        context = {
            **_form_context(params, error),
            "filter_error": filter_message(error),
            "filter_field": error.field,
            "filter_anchor": f"f-{error.field}" if error.field in LOG_FIELDS else "",
        }
        status = 200 if request.htmx else 400
    else:
        context = {**_log_context(filters, page, before), **_form_context(params)}
        # The address bar gets the canonical query (no blank filters), not the raw form.
        pushed = url_with("audit:log", filters.querystring(**({"before": before} if before else {})))
    # For htmx, only the results (the whole page when htmx restores history).
    partial = "#results" if request.htmx and not request.htmx.history_restore_request else ""
    response = render(request, f"audit/log.html{partial}", context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    if request.htmx and pushed:
        push_url(response, pushed)
    return response


urlpatterns: list[URLPattern] = [path("events/", log_view, name="log")]
