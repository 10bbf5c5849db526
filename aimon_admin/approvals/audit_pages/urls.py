"""The auditor's pages under /audit/. Each view module lists its own routes."""

from __future__ import annotations

from aimon_admin.approvals.audit_pages import analytics_views, verify_views, views

app_name = "audit"

urlpatterns = [*views.urlpatterns, *analytics_views.urlpatterns, *verify_views.urlpatterns]
