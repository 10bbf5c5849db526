"""Browser views of accounts: the page a locked-out sign-in gets."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from aimon_admin.core.plurals import counted

LOCKOUT_STATUS = 429
LOCKOUT_TITLE = "Too many failed sign-ins"
LOCKOUT_PAUSED = (
    "Sign-in for this username from your address is paused for {count} minute",
    "Sign-in for this username from your address is paused for {count} minutes",
)
LOCKOUT_AFTER = (" after {count} failed attempt.", " after {count} failed attempts.")
LOCKOUT_ADVICE = " Wait and try again, or ask an operator, who can unlock it on their Locked sign-ins page."


def lockout_message(*, minutes: int, limit: int) -> str:
    """What a locked-out sign-in reads: how long, after how many failures, and what to do."""
    return counted(LOCKOUT_PAUSED, minutes) + counted(LOCKOUT_AFTER, limit) + LOCKOUT_ADVICE


def lockout(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict | None = None,
) -> HttpResponse:
    """django-axes' lockout response (AXES_LOCKOUT_CALLABLE): our styled error page, 429."""
    message = lockout_message(
        minutes=int(settings.AXES_COOLOFF_TIME.total_seconds() // 60), limit=settings.AXES_FAILURE_LIMIT
    )
    context = {
        "status": LOCKOUT_STATUS,
        "title": LOCKOUT_TITLE,
        "message": message,
        "request_id": getattr(request, "request_id", ""),
    }
    return render(request, "core/error.html", context, status=LOCKOUT_STATUS)
