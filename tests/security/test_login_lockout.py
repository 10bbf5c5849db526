"""Sign-in throttling: django-axes on the custom login view.

A username is locked out from one address after AXES_FAILURE_LIMIT failed sign-ins; the
lockout is our styled error page (429) and an audit event; every failed attempt is still
its own LOGIN_FAILED event; other addresses and other usernames are untouched; an
operator's `unlock_login` lifts it, audited (A1).
"""

from __future__ import annotations

from collections.abc import Callable
from io import StringIO

import pytest
from axes.models import AccessAttempt
from django.core.management import call_command
from django.test import Client, RequestFactory, override_settings
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.accounts.views import LOCKOUT_STATUS, LOCKOUT_TITLE
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.addresses import client_ip
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

LIMIT = 3
WRONG = "not the password at all 7"


def _sign_in(client: Client, username: str, password: str, ip: str = "10.0.0.1"):
    return client.post(
        reverse("accounts:login"),
        {"username": username, "password": password},
        REMOTE_ADDR=ip,
    )


def _events(action: str, username: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, subject=username).order_by("seq"))


@pytest.fixture
def person(make_user: Callable[..., User]) -> User:
    return make_user("lockme", "approver")


@override_settings(AXES_FAILURE_LIMIT=LIMIT)
def test_failures_below_the_limit_still_let_the_right_password_in(client: Client, person: User) -> None:
    for _ in range(LIMIT - 1):
        response = _sign_in(client, person.username, WRONG)
        assert response.status_code == 303  # back to the sign-in page (post/redirect/get)
        page = client.get(response["Location"]).content.decode()
        assert "Please enter a correct username and password" in page
    response = _sign_in(client, person.username, PASSWORD)
    assert response.status_code == 302
    assert response["Location"] == reverse("core:home")
    # AXES_RESET_ON_SUCCESS: a good sign-in forgets the earlier failures.
    assert not AccessAttempt.objects.filter(username=person.username).exists()


@override_settings(AXES_FAILURE_LIMIT=LIMIT)
def test_limit_reached_locks_out_with_styled_page_and_audits_it(client: Client, person: User) -> None:
    # A1: every failed attempt stays a LOGIN_FAILED event; the lockout is its own WARNING.
    for _ in range(LIMIT - 1):
        assert _sign_in(client, person.username, WRONG).status_code == 303
    response = _sign_in(client, person.username, WRONG)
    assert response.status_code == LOCKOUT_STATUS
    page = response.content.decode()
    assert LOCKOUT_TITLE in page
    assert 'class="card narrow"' in page  # templates/core/error.html, inside base.html
    assert "ask an operator, who can unlock it on their Locked sign-ins page" in page

    failed = _events(AuditAction.LOGIN_FAILED, person.username)
    assert len(failed) == LIMIT
    assert all(e.level == AuditLevel.WARNING for e in failed)
    locked = _events(AuditAction.LOGIN_LOCKED_OUT, person.username)
    assert len(locked) == 1
    assert locked[0].level == AuditLevel.WARNING
    assert locked[0].details["ip_address"] == "10.0.0.1"
    assert locked[0].details["failures"] == LIMIT
    assert locked[0].details["failure_limit"] == LIMIT


@override_settings(AXES_FAILURE_LIMIT=LIMIT)
def test_locked_out_pair_is_refused_even_with_the_right_password(client: Client, person: User) -> None:
    for _ in range(LIMIT):
        _sign_in(client, person.username, WRONG)
    response = _sign_in(client, person.username, PASSWORD)
    assert response.status_code == LOCKOUT_STATUS
    assert "_auth_user_id" not in client.session
    assert not _events(AuditAction.LOGIN_SUCCEEDED, person.username)
    # The refused attempt is still recorded as a failure, and as a lockout again.
    assert len(_events(AuditAction.LOGIN_FAILED, person.username)) == LIMIT + 1
    assert len(_events(AuditAction.LOGIN_LOCKED_OUT, person.username)) == 2


@override_settings(AXES_FAILURE_LIMIT=LIMIT)
def test_lockout_is_per_username_and_address(
    client: Client, person: User, make_user: Callable[..., User]
) -> None:
    other = make_user("bystander", "approver")
    for _ in range(LIMIT):
        _sign_in(client, person.username, WRONG, ip="10.0.0.1")
    # Same person from another address: not locked (an attacker cannot lock them out everywhere).
    assert _sign_in(Client(), person.username, PASSWORD, ip="10.0.0.2").status_code == 302
    # Another person from the locked address: not locked.
    assert _sign_in(Client(), other.username, PASSWORD, ip="10.0.0.1").status_code == 302
    # The locked pair still is.
    assert _sign_in(Client(), person.username, PASSWORD, ip="10.0.0.1").status_code == LOCKOUT_STATUS


@override_settings(AXES_FAILURE_LIMIT=LIMIT)
def test_unlock_login_command_lifts_the_lockout_and_is_audited(client: Client, person: User) -> None:
    for _ in range(LIMIT):
        _sign_in(client, person.username, WRONG)
    assert _sign_in(client, person.username, PASSWORD).status_code == LOCKOUT_STATUS

    out = StringIO()
    call_command("unlock_login", person.username, stdout=out)
    assert f"unlocked {person.username} (1 failure record cleared)" in out.getvalue()
    unlocked = _events(AuditAction.LOGIN_UNLOCKED, person.username)
    assert len(unlocked) == 1
    assert unlocked[0].details == {"attempt_records_cleared": 1}
    assert unlocked[0].channel == "CLI"

    assert _sign_in(client, person.username, PASSWORD).status_code == 302


def test_client_address_is_remote_addr_unless_behind_a_proxy() -> None:
    request = RequestFactory().get("/", REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR="1.2.3.4, 5.6.7.8")
    # A client-supplied X-Forwarded-For is not trusted by default: one guess per fake address.
    with override_settings(AIMON_TRUST_FORWARDED_FOR=False):
        assert client_ip(request) == "10.9.9.9"
    # Behind the TLS proxy, the entry the proxy appended (the last) is the client.
    with override_settings(AIMON_TRUST_FORWARDED_FOR=True):
        assert client_ip(request) == "5.6.7.8"
        bare = RequestFactory().get("/", REMOTE_ADDR="10.9.9.9")
        assert client_ip(bare) == "10.9.9.9"
