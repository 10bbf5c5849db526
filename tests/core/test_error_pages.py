"""No page shows a raw stack trace or an unstyled error.

Each error a browser can meet is made through the real stack with DEBUG off, as in
production: 400 (a host outside ALLOWED_HOSTS), 403 (a role without the permission),
404, 405 (Django's method checks answer with an empty body; StyledErrorMiddleware puts the
page in it), 500 (a view that raises, in this module's URLconf) and the CSRF failure page.
Each renders the product's error template: the stylesheet, a title, a clear message, a
way back, and no traceback. Under /api/ the same errors stay JSON.
"""

from __future__ import annotations

import json

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path, reverse

from aimon_admin import urls as product_urls
from aimon_admin.accounts.models import User
from aimon_admin.core.views import ERROR_MESSAGES, ERROR_TITLES


def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug: secret detail that must not reach the page")


# This module is also a URLconf (pytest.mark.urls): the product's, plus a view that raises.
urlpatterns = [path("boom/", boom), path("api/v1/boom", boom), *product_urls.urlpatterns]
handler400 = product_urls.handler400
handler403 = product_urls.handler403
handler404 = product_urls.handler404
handler500 = product_urls.handler500


@pytest.fixture(autouse=True)
def production_like(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = False


def assert_styled(response: HttpResponse, status: int, message: str) -> str:
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert '<link rel="stylesheet" href="/static/css/app.css">' in html
    assert '<section class="card narrow">' in html
    assert '<p class="error-status">' in html
    assert f"Error {status}" in html
    assert f"<h1>{ERROR_TITLES[status]}</h1>" in html
    assert message in html
    assert '<a class="btn btn-primary" href="/">Back to the start page</a>' in html
    assert "Request id:" in html
    for raw in ("Traceback", "Exception Value", "technical_500", "Django Version", "secret detail"):
        assert raw not in html
    return html


def test_400_a_host_outside_allowed_hosts(operator: User) -> None:
    client = Client()
    client.force_login(operator)
    response = client.get("/", headers={"host": "evil.example"})
    assert_styled(response, 400, ERROR_MESSAGES[400])


def test_403_a_role_without_the_permission(approver: User) -> None:
    client = Client()
    client.force_login(approver)
    html = assert_styled(client.get(reverse("runtimes:list")), 403, ERROR_MESSAGES[403])
    assert 'aria-label="Main"' in html  # the page keeps its navigation: a way on


def test_404_an_unknown_page(approver: User) -> None:
    client = Client()
    client.force_login(approver)
    assert_styled(client.get("/no/such/page/"), 404, ERROR_MESSAGES[404])


@pytest.mark.parametrize(
    ("method", "name", "allowed"),
    [
        ("get", "accounts:logout", "POST, OPTIONS"),  # a POST-only view opened as a page
        ("post", "approvals:inbox", "GET"),  # a form sent to a page that only shows
    ],
)
def test_405_a_method_the_page_does_not_take(approver: User, method: str, name: str, allowed: str) -> None:
    client = Client()
    client.force_login(approver)
    response = getattr(client, method)(reverse(name))
    assert_styled(response, 405, "This address does not answer that kind of request")
    assert response["Allow"] == allowed  # still a proper 405


def test_405_under_the_api_stays_json(runtime_token: str) -> None:
    client = Client(headers={"authorization": f"Bearer {runtime_token}"})
    response = client.get(reverse("api:skill-decisions"))
    assert response.status_code == 405
    assert response["Content-Type"].startswith("application/json")
    assert "error" in json.loads(response.content) or "detail" in json.loads(response.content)


@pytest.mark.urls(__name__)
def test_500_a_view_that_raises(approver: User) -> None:
    client = Client()
    client.raise_request_exception = False
    client.force_login(approver)
    response = client.get("/boom/")
    html = assert_styled(response, 500, ERROR_MESSAGES[500])
    # Standalone (no database, no context processors): the brand links home, no navigation.
    assert 'aria-label="Main"' not in html
    assert '<a class="brand" href="/">AIMON Admin</a>' in html


@pytest.mark.urls(__name__)
def test_500_under_the_api_is_json_without_the_detail(db: None) -> None:
    client = Client()
    client.raise_request_exception = False
    response = client.get("/api/v1/boom")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("application/json")
    assert "secret detail" not in response.content.decode()


def test_csrf_failure_page(operator: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    response = client.post(reverse("runtimes:create"), {"name": "x"})
    assert_styled(response, 403, ERROR_MESSAGES["csrf"])


def test_error_pages_link_the_favicon_so_browsers_stop_asking_for_favicon_ico(approver: User) -> None:
    client = Client()
    client.force_login(approver)
    for response in (client.get("/no/such/page/"), client.get(reverse("approvals:inbox"))):
        assert (
            '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in response.content.decode()
        )
    # The icon itself is served (WhiteNoise, from the app's static folder).
    icon = client.get("/static/favicon.svg")
    assert icon.status_code == 200
    assert b"<svg" in b"".join(icon.streaming_content) if icon.streaming else icon.content
