"""The runtime API, v1 (../shared/API.md). Each app adds its routes here."""

from __future__ import annotations

from collections.abc import Callable

from django.urls import URLPattern, re_path

from aimon_admin.runtimes.api.views import runtime_self

app_name = "api"


def api_path(route: str, view: Callable, name: str) -> URLPattern:
    """A route whose trailing slash is optional (API.md)."""
    return re_path(rf"^{route}/?$", view, name=name)


urlpatterns = [
    api_path("runtime", runtime_self, name="runtime-self"),
]
