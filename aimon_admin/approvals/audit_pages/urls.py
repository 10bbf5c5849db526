"""The auditor's pages under /audit/. Each view module lists its own routes."""

from __future__ import annotations

from aimon_admin.audit.views import analytics, pages

app_name = "audit"

urlpatterns = [*pages.urlpatterns, *analytics.urlpatterns]
