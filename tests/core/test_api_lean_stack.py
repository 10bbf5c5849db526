"""The runtime API's lean stack (core.middleware.RuntimeApiStack): a request under
RUNTIME_API_PREFIXES is served by a handler of its own whose middleware is
RUNTIME_API_MIDDLEWARE (its request id, the body limit, the security headers, the
Content-Length, the styled errors): no page middleware runs, none of their hooks either
(CSRF's view check included), under the test client, WSGI and ASGI alike; a page takes the
whole chain."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import pytest
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, JsonResponse
from django.test import Client
from django.urls import path
from rest_framework.test import APIClient

from aimon_admin import urls as product_urls
from aimon_admin.asgi import application as asgi_application
from aimon_admin.core.middleware import REQUEST_ID_HEADER

PAGE_ATTRIBUTES = ("session", "user", "htmx", "_messages", "csp_nonce")


def what_ran(request: HttpRequest) -> JsonResponse:
    """Which page middleware left its mark on the request. Not CSRF-exempt: a POST to it
    passes only where CSRF's view hook does not run."""
    return JsonResponse({name: hasattr(request, name) for name in PAGE_ATTRIBUTES})


def fails(request: HttpRequest) -> JsonResponse:
    raise RuntimeError("a view's own failure")


# This module is also a URLconf (pytest.mark.urls): the product's, plus the views above.
urlpatterns = [
    path("api/v1/what-ran", what_ran),
    path("access/v1/what-ran", what_ran),
    path("api/v1/fails", fails),
    path("what-ran/", what_ran),
    *product_urls.urlpatterns,
]
handler400 = product_urls.handler400
handler403 = product_urls.handler403
handler404 = product_urls.handler404
handler500 = product_urls.handler500

NONE_RAN = dict.fromkeys(PAGE_ATTRIBUTES, False)


@pytest.mark.urls(__name__)
@pytest.mark.parametrize("route", ["/api/v1/what-ran", "/access/v1/what-ran"])
def test_the_runtime_api_takes_its_own_stack_and_keeps_what_it_needs(db: None, route: str) -> None:
    response = Client().get(route, HTTP_X_REQUEST_ID="caller-1")
    assert response.status_code == 200
    assert response.json() == NONE_RAN
    assert response[REQUEST_ID_HEADER] == "caller-1"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Length"] == str(len(response.content))
    assert "Content-Security-Policy" not in response
    assert "X-Frame-Options" not in response
    assert "Set-Cookie" not in response


@pytest.mark.urls(__name__)
def test_no_csrf_check_on_the_api_and_one_on_pages(db: None) -> None:
    client = Client(enforce_csrf_checks=True)
    api = client.post("/api/v1/what-ran", data="{}", content_type="application/json")
    assert api.status_code == 200
    assert api.json() == NONE_RAN
    page = client.post("/what-ran/", data="{}", content_type="application/json")
    assert page.status_code == 403


@pytest.mark.urls(__name__)
def test_a_page_takes_the_whole_chain(db: None) -> None:
    response = Client().get("/what-ran/")
    assert response.json() == dict.fromkeys(PAGE_ATTRIBUTES, True)
    assert "Content-Security-Policy" in response
    assert response["X-Frame-Options"] == "DENY"
    assert response[REQUEST_ID_HEADER]


@pytest.mark.urls(__name__)
def test_a_failure_on_the_lean_stack_is_still_the_api_s_json_500(db: None, settings: Any) -> None:
    settings.DEBUG = False
    client = Client()
    client.raise_request_exception = False
    response = client.get("/api/v1/fails")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert response[REQUEST_ID_HEADER]


@pytest.mark.urls(__name__)
def test_the_wsgi_application_serves_the_api_through_its_own_stack(db: None) -> None:
    # What granian calls in make prod: Django's WSGI handler, MIDDLEWARE first in it.
    handler = WSGIHandler()
    statuses: list[str] = []
    headers: list[list[tuple[str, str]]] = []

    def get(path: str) -> dict[str, bool]:
        environ = Client()._base_environ(PATH_INFO=path, REQUEST_METHOD="GET")
        environ["wsgi.input"] = io.BytesIO(b"")

        def start_response(status: str, sent: list[tuple[str, str]]) -> None:
            statuses.append(status)
            headers.append(sent)

        body = b"".join(handler(environ, start_response))
        return json.loads(body)

    assert get("/api/v1/what-ran") == NONE_RAN
    assert not any(name == "Set-Cookie" for name, _ in headers[-1])
    assert get("/what-ran/") == dict.fromkeys(PAGE_ATTRIBUTES, True)
    assert statuses == ["200 OK", "200 OK"]


async def _asgi_get(path: str) -> tuple[int, dict[bytes, bytes], bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }
    sent: list[dict] = []
    done = asyncio.Event()

    async def receive() -> dict:
        if not done.is_set():
            done.set()
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(60)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    await asgi_application(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {name.lower(): value for name, value in start["headers"]}, body


@pytest.mark.urls(__name__)
@pytest.mark.django_db(transaction=True)
def test_make_run_s_asgi_application_takes_the_same_two_stacks() -> None:
    status, headers, body = asyncio.run(_asgi_get("/api/v1/what-ran"))
    assert status == 200
    assert json.loads(body) == NONE_RAN
    assert b"set-cookie" not in headers
    assert headers[REQUEST_ID_HEADER.lower().encode()]
    status, headers, body = asyncio.run(_asgi_get("/what-ran/"))
    assert json.loads(body) == dict.fromkeys(PAGE_ATTRIBUTES, True)
    assert b"content-security-policy" in headers


def test_the_lean_stack_is_a_subset_of_the_whole_chain_without_any_page_middleware() -> None:
    page_only = {
        "csp.middleware.CSPMiddleware",
        "whitenoise.middleware.WhiteNoiseMiddleware",
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
        "django_htmx.middleware.HtmxMiddleware",
        "axes.middleware.AxesMiddleware",
    }
    assert settings.MIDDLEWARE[0] == "aimon_admin.core.middleware.RuntimeApiStack"
    assert page_only <= set(settings.MIDDLEWARE)
    assert not page_only & set(settings.RUNTIME_API_MIDDLEWARE)
    assert set(settings.RUNTIME_API_MIDDLEWARE) <= set(settings.MIDDLEWARE)


def test_the_product_s_decisions_answer_through_the_lean_stack(api: APIClient) -> None:
    # The real routes, with a real token: the decision, the tool decision and AuthZEN.
    skill = api.post(
        "/api/v1/skill-decisions",
        {"skills": ["read-file"], "session_id": "s-1"},
        format="json",
        HTTP_X_REQUEST_ID="lean-1",
    )
    tool = api.post("/api/v1/tool-decisions", {"tool": "read_note"}, format="json")
    discovery = api.get("/.well-known/authzen-configuration")
    for response in (skill, tool, discovery):
        assert response.status_code == 200, response.content
        assert "Set-Cookie" not in response
        assert "Content-Security-Policy" not in response
        assert response.wsgi_request.path.startswith(settings.RUNTIME_API_PREFIXES)
        assert not hasattr(response.wsgi_request, "session")
    assert skill[REQUEST_ID_HEADER] == "lean-1"
    refused = APIClient().post(
        "/api/v1/skill-decisions", {"skills": ["x"]}, format="json", HTTP_AUTHORIZATION="Bearer nope"
    )
    assert refused.status_code == 401
    assert not hasattr(refused.wsgi_request, "session")
