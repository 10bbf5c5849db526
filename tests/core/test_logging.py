"""The server log: a refused request is one line; a server error keeps its traceback.

Django hands the exception it answered to its `django.request` logger, so every 403 from a
role check printed a full stack trace. A 4xx is the product working: its line (status,
path, request id) is enough. A 500 is a bug: its traceback stays.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path, reverse

from aimon_admin import urls as product_urls
from aimon_admin.accounts.models import User


def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug")


# This module is also a URLconf (pytest.mark.urls): the product's, plus a view that raises.
urlpatterns = [path("boom/", boom), *product_urls.urlpatterns]
handler400 = product_urls.handler400
handler403 = product_urls.handler403
handler404 = product_urls.handler404
handler500 = product_urls.handler500


@pytest.fixture
def server_log() -> Iterator[io.StringIO]:
    """What the configured console handler prints, the server log itself."""
    (handler,) = [h for h in logging.getLogger("django").handlers if h.name == "console"]
    assert isinstance(handler, logging.StreamHandler)
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        yield stream
    finally:
        handler.setStream(previous)


def test_a_403_is_logged_as_one_line_without_traceback(
    approver: User, caplog: pytest.LogCaptureFixture, server_log: io.StringIO
) -> None:
    # Every 403 once printed a full traceback into the server log.
    client = Client()
    client.force_login(approver)
    assert client.get(reverse("runtimes:list")).status_code == 403

    (record,) = [r for r in caplog.records if getattr(r, "status_code", None) == 403]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "Forbidden (Permission denied): /runtimes/"
    assert record.exc_info is None
    assert record.exc_text is None
    lines = server_log.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "WARNING django.request" in lines[0]
    assert lines[0].endswith("Forbidden (Permission denied): /runtimes/")


@pytest.mark.urls(__name__)
def test_a_500_keeps_its_traceback(
    db: None, caplog: pytest.LogCaptureFixture, server_log: io.StringIO, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = False
    client = Client(raise_request_exception=False)
    assert client.get("/boom/").status_code == 500

    (record,) = [r for r in caplog.records if getattr(r, "status_code", None) == 500]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.exc_info[0] is RuntimeError
    printed = server_log.getvalue()
    assert "Traceback (most recent call last):" in printed
    assert "RuntimeError: a bug" in printed


def test_a_400_for_an_unknown_host_is_one_line_too(db: None, server_log: io.StringIO, settings) -> None:  # type: ignore[no-untyped-def]
    # Logged by django.security.DisallowedHost, a logger of its own: the handler's filter
    # covers every 4xx it prints, not only django.request's.
    settings.DEBUG = False
    assert Client(HTTP_HOST="evil.example").get("/").status_code == 400
    printed = server_log.getvalue()
    assert "Invalid HTTP_HOST header" in printed
    assert "Traceback" not in printed
    assert len(printed.splitlines()) == 1, printed
