"""The client's address: what failed sign-ins are counted under (django-axes), and what the
metrics' allow-list reads."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    """The address the request came from.

    Behind a TLS proxy (DJANGO_BEHIND_TLS_PROXY) every request comes from the proxy, so
    the client is the last address in X-Forwarded-For: the one the proxy itself appended.
    Earlier entries are whatever the client sent, and trusting them would let an attacker
    pick a fresh address for every guess.
    """
    remote = request.META.get("REMOTE_ADDR", "") or ""
    if settings.AIMON_TRUST_FORWARDED_FOR:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        forwarded = [part for part in forwarded if part]
        if forwarded:
            return forwarded[-1]
    return remote
