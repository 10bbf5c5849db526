"""The home page and error pages (JSON under the API's prefixes, HTML
elsewhere)."""

from __future__ import annotations

import sys

from django.contrib.auth.decorators import login_required
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import resolve, reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from aimon_admin.core import home as home_sections
from aimon_admin.core import metrics
from aimon_admin.core.api import UNAVAILABLE_MESSAGE, error_body
from aimon_admin.core.middleware import API_PREFIXES

ERROR_TITLES = {
    400: "Bad request",
    403: "Not allowed",
    404: "Not found",
    405: "Not possible this way",
    500: "Something went wrong",
    503: "The database is unreachable",
}
ERROR_MESSAGES: dict[int | str, str] = {
    400: "The request could not be understood.",
    "csrf": (
        "The form had expired or was sent from another site, so nothing was changed. "
        "Go back, reload the page and try again."
    ),
    403: "Your role does not allow this page.",
    404: "There is nothing here, or it is not yours to see.",
    405: (
        "This address does not answer that kind of request: a change is made with its form's "
        "button, not by opening the address. Nothing was changed."
    ),
    500: "The error has been logged with its request id. Nothing was changed.",
    503: (
        "The database cannot be reached just now, so this page cannot be shown. Nothing was "
        "changed. Try again in a few seconds."
    ),
    # A POST may have been committed just before the database went away, with only the
    # page after it failing: the approver must look, not assume.
    "503-post": (
        "The database cannot be reached just now. What you sent (an answer, or a change) may "
        "or may not have been saved: once the database is back, open the request's page (or "
        "reload this page) to see what holds before you send it again."
    ),
}
# How long a browser or a balancer should wait before trying again while the database is down.
RETRY_AFTER_SECONDS = 5
# The 503's message for htmx, in a header: app.js's failure toast shows these exact words.
MESSAGE_HEADER = "X-Aimon-Message"
CHECK_LABEL = "Open the request page"
DATABASE_ERRORS = (OperationalError, InterfaceError)


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    """What needs doing, for each role the person holds: the sections the apps provide
    (core.home), each count a link to its list."""
    return render(request, "core/home.html", {"sections": home_sections.sections_for(request)})


def _error(request: HttpRequest, status: int, message: str | None = None) -> HttpResponse:
    if status == 500 and isinstance(sys.exception(), DATABASE_ERRORS):
        # Raised outside a view (a middleware's session read or save): the same 503.
        return database_unavailable(request)
    message = message or ERROR_MESSAGES[status]
    if request.path.startswith(API_PREFIXES):
        return JsonResponse(error_body(status, message), status=status)
    context = {
        "status": status,
        "title": ERROR_TITLES[status],
        "message": message,
        "request_id": getattr(request, "request_id", ""),
    }
    if status == 500:
        # A 500 page must not need the database (it may be why we are here): a standalone
        # template rendered without the request, so no context processor touches it.
        return render(None, "core/error_500.html", context, status=status)
    return render(request, "core/error.html", context, status=status)


@csrf_exempt  # API callers authenticate with tokens, not cookies; there is nothing to forge
def api_not_found(request: HttpRequest) -> JsonResponse:
    return JsonResponse(error_body(404, "No such API endpoint."), status=404)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _error(request, 400)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _error(request, 403)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    return _error(request, 403, ERROR_MESSAGES["csrf"])


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _error(request, 404)


def server_error(request: HttpRequest) -> HttpResponse:
    return _error(request, 500)


def _request_page(request: HttpRequest) -> str | None:
    """The page of the approval request a POST was about, if it was about one."""
    try:
        match = resolve(request.path_info)
    except Http404:
        return None
    if match.namespace == "approvals" and "pk" in match.kwargs and match.url_name in ("answer", "dismiss"):
        return reverse("approvals:request", kwargs={"pk": match.kwargs["pk"]})
    return None


def database_unavailable(request: HttpRequest) -> HttpResponse:
    """503 while the database cannot be reached: never a 500, and never a guess.

    Under the API's prefixes the API's JSON body. Elsewhere the styled error page, rendered
    without the request (no context processor may touch the database), saying for a POST that
    what was sent may or may not have been saved. An htmx request gets the same words in a header,
    which app.js's failure toast shows (htmx swaps nothing on a 5xx).
    """
    metrics.DATABASE_ERRORS.labels("page").inc()
    if request.path.startswith(API_PREFIXES):
        response: HttpResponse = JsonResponse(error_body(503, UNAVAILABLE_MESSAGE), status=503)
    else:
        posted = request.method not in ("GET", "HEAD", "OPTIONS")
        message = ERROR_MESSAGES["503-post" if posted else 503]
        check_url = _request_page(request) if posted else None
        context = {
            "status": 503,
            "title": ERROR_TITLES[503],
            "message": message,
            "request_id": getattr(request, "request_id", ""),
            "check_url": check_url,
            "check_label": CHECK_LABEL,
        }
        response = render(None, "core/error.html", context, status=503)
        response[MESSAGE_HEADER] = message
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response


def method_not_allowed(request: HttpRequest, allowed: str) -> HttpResponse:
    """The styled 405 page (or the API's JSON body), keeping the Allow header."""
    response = _error(request, 405)
    response["Allow"] = allowed
    return response
