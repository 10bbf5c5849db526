"""Post/redirect/get for every form, errors kept.

A form that fails its checks is not answered with a page (a reload would post it again,
and a GET on the form's address would be a 405 that loses what was typed). Instead
`redirect_invalid` keeps what was typed and the errors shown, under a new draft id in the
session, and redirects (303) to the page the form lives on with `?draft=<id>`. That page
builds its form with `form_from_draft`, which binds it again to what was typed and shows
the same errors. A reload of that page, or Back and Forward, shows them again; the page
without `?draft=` shows a fresh form.

What was typed waits server-side, in the session (never in the address); passwords and
other secrets are never kept. Only the newest few drafts of a session are kept, each for the one form it
was made by.

A page whose address should stay as typed (the sign-in page) passes `in_address=False`:
the draft is then named in the session instead, and shown once, by the next GET of that
form's page.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django import forms
from django.forms.forms import NON_FIELD_ERRORS
from django.http import HttpRequest, HttpResponseRedirect, QueryDict

DRAFT_PARAM = "draft"
DRAFTS_KEPT = 10
_SESSION_KEY = "core:form-drafts"
_ONCE_KEY = "core:form-draft-once"
_NEVER_KEPT = frozenset({"csrfmiddlewaretoken"})

FormT = TypeVar("FormT", bound=forms.BaseForm)


def _withheld(form: forms.BaseForm) -> set[str]:
    """The posted names never kept: the CSRF token, every password, and every field whose
    widget says it is `secret` (one that never shows its value again, as an MCP server's
    environment)."""
    secrets_ = {
        form.add_prefix(name)
        for name, field in form.fields.items()
        if isinstance(field.widget, forms.PasswordInput) or getattr(field.widget, "secret", False)
    }
    return set(_NEVER_KEPT) | secrets_


def with_draft(url: str, draft_id: str, anchor: str = "") -> str:
    """`url` with `draft=<id>` in its query (any earlier draft replaced), and `#anchor`."""
    parts = urlsplit(url)
    query = [
        (key, value) for key, value in parse_qsl(parts.query, keep_blank_values=True) if key != DRAFT_PARAM
    ]
    query.append((DRAFT_PARAM, draft_id))
    return urlunsplit(parts._replace(query=urlencode(query), fragment=anchor or parts.fragment))


def redirect_invalid(
    request: HttpRequest,
    form: forms.BaseForm,
    *,
    name: str,
    to: str,
    anchor: str = "",
    in_address: bool = True,
) -> HttpResponseRedirect:
    """Answer an invalid POST of `form` (called `name`) with a 303 to `to`, the page the
    form lives on, which shows it again through `form_from_draft`. Errors added after
    validation (a name taken, a refusal of the service) are kept too. `in_address=False`:
    the address stays `to`, and the next GET of the form shows the draft once."""
    withheld = _withheld(form)
    data = {key: form.data.getlist(key) for key in form.data if key not in withheld}
    errors = {field: [str(message) for message in messages] for field, messages in form.errors.items()}
    draft_id = secrets.token_urlsafe(9)
    drafts = dict(request.session.get(_SESSION_KEY, {}))
    drafts[draft_id] = {"form": name, "data": data, "errors": errors}
    request.session[_SESSION_KEY] = dict(list(drafts.items())[-DRAFTS_KEPT:])
    if not in_address:
        request.session[_ONCE_KEY] = {**request.session.get(_ONCE_KEY, {}), name: draft_id}
        return HttpResponseRedirect(to + (f"#{anchor}" if anchor else ""), status=303)
    return HttpResponseRedirect(with_draft(to, draft_id, anchor), status=303)


def draft_data(request: HttpRequest, name: str) -> tuple[QueryDict, dict[str, list[str]]] | None:
    """What was typed in form `name` and its errors, for the draft this GET names; None
    when it names none, another form's, or one no longer kept."""
    draft_id = request.GET.get(DRAFT_PARAM, "")
    once = request.session.get(_ONCE_KEY, {})
    if not draft_id and name in once:
        draft_id = once.pop(name)
        request.session[_ONCE_KEY] = once
    draft = request.session.get(_SESSION_KEY, {}).get(draft_id) if draft_id else None
    if not isinstance(draft, dict) or draft.get("form") != name:
        return None
    data = QueryDict(mutable=True)
    for key, values in draft.get("data", {}).items():
        data.setlist(key, [str(value) for value in values])
    data._mutable = False
    return data, draft.get("errors", {})


def form_from_draft(request: HttpRequest, name: str, make: Callable[[QueryDict | None], FormT]) -> FormT:
    """The form of a page: `make(None)` (unbound), or for the draft this GET names, `make`
    bound to what was typed, with exactly the errors it was sent back with."""
    found = draft_data(request, name)
    if found is None:
        return make(None)
    data, errors = found
    form = make(data)
    form.errors.clear()  # the errors it was sent back with, not a second check's
    for field, messages in errors.items():
        target = None if field == NON_FIELD_ERRORS or field not in form.fields else field
        for message in messages:
            form.add_error(target, message)
    return form
