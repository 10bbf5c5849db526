"""The auditor's pages under /audit/. Each view module lists its own routes."""

from __future__ import annotations

from aimon_admin.audit import proof_views
from aimon_admin.audit_pages import (
    analytics_views,
    event_views,
    export_views,
    grant_views,
    home_views,
    log_views,
    verify_views,
)

app_name = "audit"

urlpatterns = [
    *home_views.urlpatterns,
    *log_views.urlpatterns,
    *export_views.urlpatterns,
    *event_views.urlpatterns,
    *grant_views.urlpatterns,
    *analytics_views.urlpatterns,
    *verify_views.urlpatterns,
    *proof_views.urlpatterns,
]
