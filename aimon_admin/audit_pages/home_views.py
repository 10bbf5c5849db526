"""The audit home: escalated grants in force, the latest escalations and warnings, and the
chain's last verification."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path

from aimon_admin.approvals import selectors as approvals_selectors
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.verification import last_verification
from aimon_admin.audit_pages import selectors
from aimon_admin.audit_pages.page import auditor_page, url_with


@auditor_page
def home_view(request: HttpRequest) -> HttpResponse:
    limit = selectors.IN_FORCE_COUNT_LIMIT
    in_force = approvals_selectors.escalated_grants_in_force(limit=limit)
    context = {
        "escalations_in_force": in_force,
        "escalations_in_force_label": f"{limit}+" if in_force > limit else str(in_force),
        "latest_escalations": selectors.latest_events(action=AuditAction.SKILL_GRANT_ESCALATED),
        "latest_warnings": selectors.latest_events(level=AuditLevel.WARNING),
        "verification": last_verification(),
        "warnings_url": url_with("audit:log", "level=WARNING"),
    }
    return render(request, "audit/home.html", context)


urlpatterns: list[URLPattern] = [path("", home_view, name="home")]
