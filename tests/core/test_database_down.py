"""An unreachable database is a styled 503 with Retry-After, never a 500.

The database is the outside world here: `connection.execute_wrapper` makes every query (or
only the session's write) fail as psycopg does when PostgreSQL is gone, and the real views
and middlewares meet that OperationalError. A view's error reaches StyledErrorMiddleware;
a middleware's (the session's save) reaches the 500 handler; both answer the same 503.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path, reverse

from aimon_admin import settings
from aimon_admin import urls as product_urls
from aimon_admin.accounts.models import User
from aimon_admin.core.api import UNAVAILABLE_MESSAGE
from aimon_admin.core.views import (
    CHECK_LABEL,
    ERROR_MESSAGES,
    ERROR_TITLES,
    MESSAGE_HEADER,
    RETRY_AFTER_SECONDS,
)

APP_JS = settings.base.BASE_DIR / "static" / "js" / "app.js"


def touch_session(request: HttpRequest) -> HttpResponse:
    """A page that writes to the session: the write happens in SessionMiddleware, after it."""
    request.session["seen"] = True
    return HttpResponse("ok")


# This module is also a URLconf (pytest.mark.urls): the product's, plus the page above.
urlpatterns = [
    path("touch-session/", touch_session),
    *product_urls.urlpatterns,
]
handler400 = product_urls.handler400
handler403 = product_urls.handler403
handler404 = product_urls.handler404
handler500 = product_urls.handler500


@pytest.fixture(autouse=True)
def production_like(settings: Any) -> None:
    settings.DEBUG = False


@contextmanager
def database_down(only: Callable[[str], bool] = lambda sql: True) -> Iterator[None]:
    """Every query `only` picks fails as it does when the server has gone away."""

    def refuse(execute: Callable, sql: str, params: Any, many: bool, context: dict) -> Any:
        if only(sql):
            raise OperationalError("connection failed: server closed the connection unexpectedly")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(refuse):
        yield


def assert_503_page(response: HttpResponse, message: str) -> str:
    assert response.status_code == 503
    assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert response["Content-Type"].startswith("text/html")
    assert response[MESSAGE_HEADER] == message
    html = response.content.decode()
    assert '<link rel="stylesheet" href="/static/css/app.css">' in html
    assert f"<h1>{ERROR_TITLES[503]}</h1>" in html
    assert message.replace("'", "&#x27;") in html
    assert "Request id:" in html
    for raw in ("Traceback", "OperationalError", "server closed", "Something went wrong"):
        assert raw not in html
    return html


def signed_in(user: User) -> Client:
    client = Client()
    client.raise_request_exception = False
    client.force_login(user)
    return client


def test_a_page_with_the_database_down_is_a_styled_503(approver: User) -> None:
    client = signed_in(approver)
    with database_down():
        response = client.get(reverse("approvals:inbox"))
    html = assert_503_page(response, ERROR_MESSAGES[503])
    assert '<a class="btn btn-primary" href="/">Back to the start page</a>' in html


def test_an_htmx_answer_with_the_database_down_says_it_may_have_been_saved(approver: User) -> None:
    # The approver must look at the request page, not assume either way.
    client = signed_in(approver)
    request_id = uuid.uuid4()
    with database_down():
        response = client.post(
            reverse("approvals:answer", kwargs={"pk": request_id}),
            {"answer": "ALLOW_SESSION"},
            headers={"HX-Request": "true"},
        )
    html = assert_503_page(response, ERROR_MESSAGES["503-post"])
    page = reverse("approvals:request", kwargs={"pk": request_id})
    assert f'<a class="btn btn-primary" href="{page}">{CHECK_LABEL}</a>' in html
    assert "may or may not have been saved" in ERROR_MESSAGES["503-post"]


def test_a_form_post_elsewhere_says_the_same_without_a_request_link(operator: User) -> None:
    client = signed_in(operator)
    with database_down():
        response = client.post(reverse("runtimes:create"), {"name": "x"})
    html = assert_503_page(response, ERROR_MESSAGES["503-post"])
    assert CHECK_LABEL not in html


@pytest.mark.urls(__name__)
def test_a_database_error_raised_by_a_middleware_is_the_same_503(db: None) -> None:
    # The session is written by SessionMiddleware after the view: outside any view.
    client = Client()
    client.raise_request_exception = False
    with database_down(only=lambda sql: "django_session" in sql and not sql.lstrip().startswith("SELECT")):
        response = client.get("/touch-session/")
    assert_503_page(response, ERROR_MESSAGES[503])


def test_the_api_with_the_database_down_stays_json_503(runtime_token: str) -> None:
    client = Client(headers={"authorization": f"Bearer {runtime_token}"})
    client.raise_request_exception = False
    with database_down():
        response = client.post(
            reverse("api:skill-decisions"),
            {"skills": ["deploy"], "session_id": "s-1"},
            content_type="application/json",
        )
    assert response.status_code == 503
    assert json.loads(response.content) == {"error": "unavailable", "detail": UNAVAILABLE_MESSAGE}
    assert response["Retry-After"] == "5"


def test_the_htmx_failure_toast_says_the_same_words() -> None:
    # htmx swaps nothing on a 5xx: app.js's toast shows the 503's header, or (a 503 that
    # came without it) its own copies, which must be the server's words exactly.
    script = APP_JS.read_text()
    assert f'"{MESSAGE_HEADER}"' in script
    assert json.dumps(ERROR_MESSAGES[503]) in script
    assert json.dumps(ERROR_MESSAGES["503-post"]) in script
