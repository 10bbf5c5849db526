"""The auditor's pages under /audit/. Each view module lists its own routes."""

from __future__ import annotations

from aimon_admin.audit import proof_views
from aimon_admin.audit_pages import analytics_views, verify_views, views

app_name = "audit"

urlpatterns = [
    *views.urlpatterns,
    *analytics_views.urlpatterns,
    *verify_views.urlpatterns,
    *proof_views.urlpatterns,
]
