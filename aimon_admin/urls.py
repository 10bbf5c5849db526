"""URL configuration: browser pages, the runtime API under /api/v1/, its OpenID AuthZEN
endpoints (at the paths that specification fixes), and the API's schema."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from aimon_admin import health
from aimon_admin.approvals.api.authzen import views as authzen
from aimon_admin.core import views as core_views
from aimon_admin.core.metrics import metrics_view

urlpatterns = [
    # The runtime API first: a decision's route is then found after one prefix and two
    # routes, not after searching every page's (the "" include below is searched whole).
    re_path(r"^api/v1/", include("aimon_admin.api_urls")),
    # The tool decision as an AuthZEN policy decision point; trailing slash optional, as above.
    re_path(r"^access/v1/evaluation/?$", authzen.evaluation, name="authzen-evaluation"),
    re_path(r"^access/v1/evaluations/?$", authzen.evaluations, name="authzen-evaluations"),
    re_path(r"^\.well-known/authzen-configuration/?$", authzen.configuration, name="authzen-configuration"),
    # Prometheus' scrape: a token or an allowed address (core.metrics).
    path("metrics", metrics_view, name="metrics"),
    # Probes for balancers and orchestrators: JSON, no sign-in (aimon_admin/health.py).
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("", include("aimon_admin.core.urls")),
    path("accounts/", include("aimon_admin.accounts.urls")),
    path("runtimes/", include("aimon_admin.runtimes.urls")),
    path("registry/", include("aimon_admin.registry.urls")),
    path("approvals/", include("aimon_admin.approvals.urls")),
    path("notifications/", include("aimon_admin.notifications.urls")),
    path("audit/", include("aimon_admin.audit_pages.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("django-admin/", admin.site.urls),
    # Unknown API paths answer JSON even with DEBUG on (runtimes parse every answer).
    re_path(r"^api/", core_views.api_not_found),
    re_path(r"^access/", core_views.api_not_found),
]

handler400 = core_views.bad_request
handler403 = core_views.permission_denied
handler404 = core_views.page_not_found
handler500 = core_views.server_error
