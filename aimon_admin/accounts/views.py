"""Browser views of accounts: sign-in (a password, or the button of the OpenID Connect
provider, oidc.py), and the page a locked-out sign-in gets."""

from __future__ import annotations

from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode

from aimon_admin.accounts import oidc
from aimon_admin.accounts.forms import LoginForm
from aimon_admin.core.plurals import counted
from aimon_admin.core.prg import form_from_draft, redirect_invalid

LOCKOUT_STATUS = 429
PASSWORD_OFF_STATUS = 403
LOCKOUT_TITLE = "Too many failed sign-ins"
LOCKOUT_PAUSED = (
    "Sign-in for this username from your address is paused for {count} minute",
    "Sign-in for this username from your address is paused for {count} minutes",
)
LOCKOUT_AFTER = (" after {count} failed attempt.", " after {count} failed attempts.")
LOCKOUT_ADVICE = " Wait and try again, or ask an operator, who can unlock it on their Locked sign-ins page."
ATTEMPTS_LEFT = (
    "{count} more failed attempt pauses sign-in for this username from your address",
    "{count} more failed attempts pause sign-in for this username from your address",
)
PAUSED_FOR = (" for {count} minute.", " for {count} minutes.")


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


class LoginView(auth_views.LoginView):
    """Django's sign-in, with post/redirect/get: a failed sign-in redirects back to the sign-in
    page (its ?next= kept, no draft in the address), which shows the username as typed, the
    error and how many attempts are left before a pause; a reload posts nothing again (no
    second failure counted) and the password is never kept."""

    template_name = "accounts/login.html"
    authentication_form = LoginForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["password_sign_in"] = settings.AIMON_PASSWORD_SIGN_IN
        if settings.AIMON_OIDC_ENABLED:
            start = reverse("accounts:oidc-start")
            next_url = context.get("next") or ""
            context["oidc_start_url"] = f"{start}?{urlencode({'next': next_url})}" if next_url else start
            context["oidc_provider"] = oidc.provider_name()
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.AIMON_PASSWORD_SIGN_IN:
            # Refused before any password is read (Django's ModelBackend is not even configured).
            context = {
                "status": PASSWORD_OFF_STATUS,
                "title": oidc.PASSWORD_OFF_TITLE,
                "message": oidc.PASSWORD_OFF_MESSAGE.format(provider=oidc.provider_name()),
                "request_id": getattr(request, "request_id", ""),
            }
            return render(request, "core/error.html", context, status=PASSWORD_OFF_STATUS)
        return super().post(request, *args, **kwargs)

    def get_form(self, form_class: Any = None) -> LoginForm:
        make = form_class or self.get_form_class()
        if self.request.method == "GET":
            return form_from_draft(self.request, "login", lambda data: make(self.request, data=data))
        return super().get_form(make)

    def form_invalid(self, form: LoginForm) -> HttpResponse:
        # Failures so far for this username from this address (django-axes counted this one
        # already): say how many are left before the pause, so it never comes unannounced.
        failures = AxesProxyHandler.get_failures(self.request, {"username": form.data.get("username", "")})
        left = settings.AXES_FAILURE_LIMIT - failures
        if failures and left > 0:
            minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
            form.add_error(None, counted(ATTEMPTS_LEFT, left) + counted(PAUSED_FOR, minutes))
        # The address stays the sign-in page's own: the draft is shown once, not named in it.
        return redirect_invalid(
            self.request, form, name="login", to=self.request.get_full_path(), in_address=False
        )


login_view = LoginView.as_view()
