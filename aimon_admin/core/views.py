"""The home page, the health check, and error pages (JSON under /api/, HTML elsewhere)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from aimon_admin.core.api import error_body
from aimon_admin.core.middleware import API_PREFIX

ERROR_TITLES = {
    400: "Bad request",
    403: "Not allowed",
    404: "Not found",
    405: "Not possible this way",
    500: "Something went wrong",
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
}


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "core/home.html")


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when the database answers, 503 otherwise (for balancers)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse({"status": "unavailable", "database": "down"}, status=503)
    return JsonResponse({"status": "ok", "database": "up"})


def _error(request: HttpRequest, status: int, message: str | None = None) -> HttpResponse:
    message = message or ERROR_MESSAGES[status]
    if request.path.startswith(API_PREFIX):
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


def method_not_allowed(request: HttpRequest, allowed: str) -> HttpResponse:
    """The styled 405 page (or the API's JSON body), keeping the Allow header."""
    response = _error(request, 405)
    response["Allow"] = allowed
    return response
