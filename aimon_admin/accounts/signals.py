"""Sign-in events from django.contrib.auth, written to the audit log (A1)."""

from __future__ import annotations

from typing import Any

from axes.signals import user_locked_out
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest

from aimon_admin.accounts import services


@receiver(user_logged_in)
def _logged_in(sender: Any, request: HttpRequest, user: Any, **_: Any) -> None:
    # A sign-in through the provider says so, and what its claims gave no role for (oidc.py).
    services.login_record(user=user, **getattr(request, "oidc_sign_in", {}))


@receiver(user_login_failed)
def _login_failed(sender: Any, credentials: dict, request: HttpRequest | None = None, **_: Any) -> None:
    if "nonce" in credentials:
        return  # a sign-in through the provider: oidc.CallbackView records it, with its reason
    services.login_failure_record(username=str(credentials.get("username", ""))[:150])


@receiver(user_logged_out)
def _logged_out(sender: Any, request: HttpRequest, user: Any, **_: Any) -> None:
    if user is not None:
        services.logout_record(user=user)


@receiver(user_locked_out)
def _locked_out(sender: Any, request: HttpRequest, username: str | None, ip_address: str, **_: Any) -> None:
    services.login_lockout_record(
        username=str(username or "")[:150],
        ip_address=str(ip_address or ""),
        failures=getattr(request, "axes_failures_since_start", None),
    )
