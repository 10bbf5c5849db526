"""The runtime API's short path through the middleware (core.middleware.RuntimeApiShortcut):
a request under RUNTIME_API_PREFIXES skips the page middleware (sessions, authentication,
messages, CSRF's request hook, htmx, axes, WhiteNoise, the content security policy) and
keeps what the API needs (its request id, the body limit, the security headers, the
Content-Length, the styled errors); a page takes the whole chain."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpRequest, JsonResponse
from django.test import Client
from django.urls import path

from aimon_admin import urls as product_urls
from aimon_admin.core.middleware import REQUEST_ID_HEADER, RuntimeApiLanding, RuntimeApiShortcut

PAGE_ATTRIBUTES = ("session", "user", "htmx", "_messages", "csp_nonce")


def what_ran(request: HttpRequest) -> JsonResponse:
    """Which page middleware left its mark on the request."""
    return JsonResponse({name: hasattr(request, name) for name in PAGE_ATTRIBUTES})


def fails(request: HttpRequest) -> JsonResponse:
    raise RuntimeError("a view's own failure")


# This module is also a URLconf (pytest.mark.urls): the product's, plus the views above.
urlpatterns = [
    path("api/v1/what-ran", what_ran),
    path("api/v1/fails", fails),
    path("what-ran/", what_ran),
    *product_urls.urlpatterns,
]
handler400 = product_urls.handler400
handler403 = product_urls.handler403
handler404 = product_urls.handler404
handler500 = product_urls.handler500


@pytest.mark.urls(__name__)
def test_the_runtime_api_skips_the_page_middleware_and_keeps_its_own(db: None) -> None:
    response = Client().get("/api/v1/what-ran")
    assert response.status_code == 200
    assert response.json() == dict.fromkeys(PAGE_ATTRIBUTES, False)
    assert response[REQUEST_ID_HEADER]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Length"] == str(len(response.content))
    assert "Content-Security-Policy" not in response
    assert "Set-Cookie" not in response


@pytest.mark.urls(__name__)
def test_a_page_takes_the_whole_chain(db: None) -> None:
    response = Client().get("/what-ran/")
    assert response.json() == dict.fromkeys(PAGE_ATTRIBUTES, True)
    assert "Content-Security-Policy" in response
    assert response["X-Frame-Options"] == "DENY"


@pytest.mark.urls(__name__)
def test_a_failure_on_the_short_path_is_still_the_api_s_json_500(db: None, settings: Any) -> None:
    settings.DEBUG = False
    client = Client()
    client.raise_request_exception = False
    response = client.get("/api/v1/fails")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"


def test_a_shortcut_without_its_landing_refuses_to_start() -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="RuntimeApiLanding"):
        RuntimeApiShortcut(lambda request: None)
    RuntimeApiLanding(lambda request: None)
    RuntimeApiShortcut(lambda request: None)  # the landing built just before is taken, once
    with pytest.raises(ImproperlyConfigured):
        RuntimeApiShortcut(lambda request: None)
