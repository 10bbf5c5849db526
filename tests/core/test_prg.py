"""Post/redirect/get with errors kept: an invalid POST keeps what was typed (never a
password) and its errors in the session and redirects to the form's page, which shows them
again, as often as it is reloaded."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from django import forms
from django.contrib.sessions.backends.db import SessionStore
from django.http import HttpRequest
from django.test import RequestFactory

from aimon_admin.core import prg

pytestmark = pytest.mark.django_db


class SecretInput(forms.TextInput):
    secret = True


class NameForm(forms.Form):
    name = forms.CharField(max_length=5)
    colour = forms.MultipleChoiceField(choices=[("r", "red"), ("g", "green")], required=False)
    secret = forms.CharField(widget=forms.PasswordInput, required=False)
    token = forms.CharField(widget=SecretInput, required=False)


def posted(data: dict[str, object], session: SessionStore | None = None) -> HttpRequest:
    request = RequestFactory().post("/things/new/?next=/back/", data)
    request.session = session or SessionStore()
    return request


def got(url: str, session: SessionStore) -> HttpRequest:
    request = RequestFactory().get(url)
    request.session = session
    return request


def invalid(session: SessionStore | None = None, name: str = "toolong") -> tuple[str, SessionStore]:
    request = posted(
        {
            "name": name,
            "colour": ["r", "g"],
            "secret": "hunter2",
            "token": "s3cr3t",
            "csrfmiddlewaretoken": "x",
        },
        session,
    )
    form = NameForm(request.POST)
    assert not form.is_valid()
    form.add_error(None, "A thing with this name exists already.")  # as a service refusal adds it
    response = prg.redirect_invalid(request, form, name="thing", to=request.get_full_path(), anchor="new")
    assert response.status_code == 303
    return response["Location"], request.session


def test_an_invalid_post_redirects_to_the_page_with_a_draft_id() -> None:
    location, _ = invalid()
    parts = urlsplit(location)
    assert parts.path == "/things/new/"
    query = parse_qs(parts.query)
    assert query["next"] == ["/back/"]
    assert len(query[prg.DRAFT_PARAM]) == 1
    assert parts.fragment == "new"


def test_the_page_shows_what_was_typed_and_the_same_errors_on_every_reload() -> None:
    location, session = invalid()
    for _ in range(2):  # the redirect's GET, then a reload
        form = prg.form_from_draft(got(location, session), "thing", lambda data: NameForm(data))
        assert form.is_bound
        assert form["name"].value() == "toolong"
        assert form["colour"].value() == ["r", "g"]
        assert form.errors["name"] == ["Ensure this value has at most 5 characters (it has 7)."]
        assert form.non_field_errors() == ["A thing with this name exists already."]


def test_a_password_a_secret_and_the_csrf_token_are_never_kept() -> None:
    location, session = invalid()
    data, _ = prg.draft_data(got(location, session), "thing")
    assert sorted(data) == ["colour", "name"]
    assert "hunter2" not in str(dict(session))
    assert "s3cr3t" not in str(dict(session))


@pytest.mark.parametrize(
    "query",
    ["", f"?{prg.DRAFT_PARAM}=nonsense", f"?{prg.DRAFT_PARAM}="],
)
def test_without_a_kept_draft_the_form_is_fresh(query: str) -> None:
    _, session = invalid()
    form = prg.form_from_draft(got(f"/things/new/{query}", session), "thing", lambda data: NameForm(data))
    assert not form.is_bound


def test_a_draft_fills_only_the_form_that_made_it() -> None:
    location, session = invalid()
    form = prg.form_from_draft(got(location, session), "other", lambda data: NameForm(data))
    assert not form.is_bound


def test_only_the_newest_drafts_are_kept() -> None:
    first, session = invalid()
    for _ in range(prg.DRAFTS_KEPT):
        last, session = invalid(session)
    assert prg.draft_data(got(first, session), "thing") is None
    assert prg.draft_data(got(last, session), "thing") is not None
    assert prg.with_draft(last, "new").count(prg.DRAFT_PARAM) == 1  # an earlier draft is replaced
