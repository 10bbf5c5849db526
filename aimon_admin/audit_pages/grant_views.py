"""The auditor's pages about grants: the escalated ones (S6), and what was in force at a
moment (S10, S12: grants are revoked, never deleted, so history answers). How a grant's
reach and state read is here too; the event page shows them for the grant it wrote.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path
from django.utils import timezone

from aimon_admin.approvals.choices import GrantScope
from aimon_admin.approvals.inbox_filter import bad_filter
from aimon_admin.approvals.models import Grant
from aimon_admin.audit.filters import ONE_VALUE_MESSAGE, FilterError, parse_cursor, parse_time
from aimon_admin.audit_pages import selectors
from aimon_admin.audit_pages.filter_form import (
    AT_HINT,
    FilterField,
    filter_message,
    first_value,
    problem_for,
    time_field,
)
from aimon_admin.audit_pages.page import auditor_page, url_with, utc_text

# Messages users see (tests import these).
NOT_A_FILTER_MESSAGE = "This page has no filter named {name!r}."
NOT_A_FIELD_MESSAGE = "This page has no field named {name!r}."
SESSION_NEEDS_RUNTIME_MESSAGE = "Name the runtime too: sessions are named per runtime."
REACH_WORDS = (
    "All sessions of runtime {runtime}",
    "no expiry",
    "survives Clear",
    # One agent-wide grant can also be revoked on its own.
    "holds until it is revoked, on its own or with Revoke agent-wide",
)


def reach(grant: Grant) -> str:
    """How far an agent-wide grant reaches, in words (S6); "" for a grant of one session."""
    if grant.scope != GrantScope.AGENT:
        return ""
    expiry = f"expires {utc_text(grant.expires_at)}" if grant.expires_at is not None else REACH_WORDS[1]
    return ", ".join([REACH_WORDS[0].format(runtime=grant.runtime.name), expiry, *REACH_WORDS[2:]])


def grant_state(grant: Grant, now: dt.datetime | None = None) -> dict[str, Any]:
    """In force, or when, by whom and why it ended (revoked or expired)."""
    now = now or timezone.now()
    if grant.revoked_at is not None:
        return {
            "in_force": False,
            "when": grant.revoked_at,
            "by": grant.revoked_by.username if grant.revoked_by else "",
            "why": grant.get_revoke_reason_display(),
        }
    if grant.expires_at is not None and grant.expires_at <= now:
        return {"in_force": False, "when": grant.expires_at, "by": "", "why": "Expired"}
    return {"in_force": True}


@auditor_page
def escalations_view(request: HttpRequest) -> HttpResponse:
    params = dict(request.GET.lists())
    try:
        for name in params:
            if name not in ("runtime", "before"):
                raise FilterError(name, NOT_A_FILTER_MESSAGE.format(name=name))
        runtime_name = ",".join(v.strip() for v in params.get("runtime", []) if v.strip())
        runtime = selectors.runtime_named(runtime_name) if runtime_name else None
        before = parse_cursor(params)
    except FilterError as error:
        return bad_filter(request, filter_message(error))
    page = selectors.escalation_page(before=before, runtime=runtime, size=selectors.ESCALATION_PAGE_SIZE)
    now = timezone.now()
    rows = [
        {
            "event": row.event,
            "grant": row.grant,
            "reach": reach(row.grant) if row.grant else "",
            "state": grant_state(row.grant, now) if row.grant else None,
        }
        for row in page.rows
    ]
    query = {"runtime": runtime.name} if runtime else {}
    context = {
        "rows": rows,
        "runtime": runtime,
        "paged": before is not None,
        "newest_url": url_with("audit:escalations", query),
        "older_url": (
            url_with("audit:escalations", {**query, "before": page.older_cursor}) if page.older_cursor else ""
        ),
    }
    return render(request, "audit/escalations.html", context)


# --- In force at a moment ----------------------------------------------------------------------


@auditor_page
def in_force_view(request: HttpRequest) -> HttpResponse:
    params = dict(request.GET.lists())
    values = {name: first_value(params, name) for name in ("runtime", "session", "at")}
    context: dict[str, Any] = {"result": None}
    failed: FilterError | None = None
    try:
        for name, given in params.items():
            if name not in values:
                raise FilterError(name, NOT_A_FIELD_MESSAGE.format(name=name))
            if len(given) > 1:
                raise FilterError(name, ONE_VALUE_MESSAGE.format(count=len(given)))
        if values["session"] and not values["runtime"]:
            raise FilterError("runtime", SESSION_NEEDS_RUNTIME_MESSAGE)
        at = parse_time("at", values["at"], end=False) if values["at"] else timezone.now()
        if values["runtime"]:
            runtime = selectors.runtime_named(values["runtime"])
            session = (
                selectors.session_named(runtime=runtime, session_id=values["session"])
                if values["session"]
                else None
            )
            context["result"] = selectors.grants_in_force_at(runtime=runtime, session=session, at=at)
    except FilterError as error:
        failed = error
        context["filter_error"] = filter_message(error)
        context["filter_field"] = error.field

    context["fields"] = [
        FilterField(
            "runtime",
            "Runtime",
            values["runtime"],
            error=problem_for(failed, "runtime"),
            datalist="runtime-names",
            required=True,
        ),
        FilterField("session", "Session (optional)", values["session"], error=problem_for(failed, "session")),
        time_field("at", values["at"], end=False, error=failed, hint=AT_HINT),
    ]
    if context["result"] is not None:
        now = timezone.now()
        context["rows"] = [
            {"grant": grant, "reach": reach(grant), "state": grant_state(grant, now)}
            for grant in context["result"].grants
        ]
    context["runtime_names"] = selectors.runtime_names()
    return render(request, "audit/in_force.html", context, status=400 if failed else 200)


urlpatterns: list[URLPattern] = [
    path("escalations/", escalations_view, name="escalations"),
    path("in-force/", in_force_view, name="in-force"),
]
