"""What every registry page shares: rendering a page or its partial, the actor, redirects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django_htmx.http import HttpResponseClientRedirect

from aimon_admin.core.actors import Actor

AXES = (
    ("side_effect_level", "Side-effect level"),
    ("destructive_behavior", "Destructive behavior"),
    ("idempotency_behavior", "Idempotency behavior"),
)


def render_page(
    request: HttpRequest, template: str, context: dict[str, Any], partial: str | None = None
) -> HttpResponse:
    """The page, or its named partial for an htmx request (not for htmx restoring history)."""
    htmx = getattr(request, "htmx", None)
    name = template
    if partial and htmx and not htmx.history_restore_request:
        name = f"{template}#{partial}"
    response = render(request, name, context)
    patch_vary_headers(response, ("HX-Request",))
    return response


def is_htmx(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False))


def actor_of(request: HttpRequest) -> Actor:
    return Actor.for_user(request.user)  # type: ignore[arg-type]


def error_text(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return " ".join(exc.messages)
    return str(exc)


def redirect_after_write(request: HttpRequest, url: str) -> HttpResponse:
    """After a write: a normal redirect, or for htmx a client-side one (the page changes whole)."""
    return HttpResponseClientRedirect(url) if is_htmx(request) else redirect(url)


@dataclass(frozen=True)
class AxisChange:
    label: str
    before: str
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after
