"""How every auditor page answers, and the links they build.

Read-only: every view is GET (a POST is 405) and needs `audit.view_auditevent`, which the
auditor and operator roles hold. Filters live in the query string; how one that cannot be
read is shown is in filter_form.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

PERMISSION = "audit.view_auditevent"


def auditor_page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """GET only, signed in (else the login page), and the audit permission (else 403)."""
    return require_GET(login_required(permission_required(PERMISSION, raise_exception=True)(view)))


def url_with(name: str, query: str | Mapping[str, Any] = "") -> str:
    """The page `name` with a query string, given as text or as the values to encode."""
    query = query if isinstance(query, str) else urlencode(query)
    base = reverse(name)
    return f"{base}?{query}" if query else base


def utc_text(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
