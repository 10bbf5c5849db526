"""Sign-in through an OpenID Connect provider, against a real one (tests/accounts/oidc_kit.py:
npm `oidc-provider` in a process of its own), with Django's test client: who is created with
which roles, the roles re-read at every sign-in, tampered and expired ID tokens refused, and
each step in the audit log (A1). Then a provider that is down or answers garbage, and password
sign-in turned off."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from aimon_admin.accounts import oidc, people_views
from aimon_admin.accounts.models import OidcIdentity, User
from aimon_admin.accounts.policy import CLAIM_MISSING, UNKNOWN_ROLE
from aimon_admin.accounts.roles import Role
from aimon_admin.accounts.selectors import LINKS_OFF_MESSAGE
from aimon_admin.accounts.services import (
    OIDC_ACTOR_LABEL,
    OIDC_NAME_TAKEN_MESSAGE,
    user_password_link,
)
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from tests.accounts.oidc_kit import (
    PROVIDER_NAME,
    TEST_CALLBACK,
    Provider,
    oidc_settings,
    running_provider,
    sign_in_through,
)
from tests.conftest import PASSWORD, TEST_ACTOR
from tests.ports import free_port

pytestmark = pytest.mark.django_db
AT_PROVIDER = "provider-pass 9Xq!"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with running_provider(tmp_path_factory.mktemp("oidc"), [TEST_CALLBACK]) as running:
        yield running


@pytest.fixture
def oidc_on(settings: Any, provider: Provider) -> Provider:
    oidc_settings(settings, provider.issuer)
    provider.id_token("normal")
    cache.clear()
    return provider


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def texts(response: Any) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def signed_in_as(client: Client) -> str | None:
    response = client.get("/")
    user = response.wsgi_request.user
    return user.username if user.is_authenticated else None


def test_someone_first_seen_is_created_with_the_mapped_roles_and_it_is_audited(oidc_on: Provider) -> None:
    oidc_on.set_user("dana", AT_PROVIDER, ["aimon-operators", "payroll"], email="dana@example.test")
    client = Client()
    response = sign_in_through(client, oidc_on, "dana", AT_PROVIDER)
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert signed_in_as(client) == "dana"
    dana = User.objects.get(username="dana")
    assert dana.roles == [Role.OPERATOR]
    assert dana.email == "dana@example.test"
    assert not dana.has_usable_password()
    identity = OidcIdentity.objects.get(user=dana)
    assert (identity.issuer, identity.subject, identity.role_problems) == (oidc_on.issuer, "dana", [])
    # A1: the person's creation and their sign-in are events.
    [created] = events(AuditAction.USER_CREATED)
    assert created.actor_label == OIDC_ACTOR_LABEL
    assert created.subject == "dana"
    assert created.details == {"roles": ["operator"], "usable_password": False, "oidc_issuer": oidc_on.issuer}
    [login] = events(AuditAction.LOGIN_SUCCEEDED)
    assert (login.actor_label, login.level, login.details) == (
        "dana",
        AuditLevel.INFO,
        {"oidc_issuer": oidc_on.issuer},
    )


def test_roles_are_read_again_at_every_sign_in(oidc_on: Provider) -> None:
    oidc_on.set_user("erin", AT_PROVIDER, ["aimon-operators"])
    sign_in_through(Client(), oidc_on, "erin", AT_PROVIDER)
    assert User.objects.get(username="erin").roles == [Role.OPERATOR]

    # Out of the operators' group at the provider, into the auditors': the next sign-in says so.
    oidc_on.set_user("erin", AT_PROVIDER, ["aimon-auditors"])
    client = Client()
    sign_in_through(client, oidc_on, "erin", AT_PROVIDER)
    assert signed_in_as(client) == "erin"
    assert User.objects.get(username="erin").roles == [Role.AUDITOR]
    [changed] = events(AuditAction.USER_ROLES_CHANGED)
    assert changed.actor_label == OIDC_ACTOR_LABEL
    assert changed.details == {"before": ["operator"], "after": ["auditor"], "oidc_issuer": oidc_on.issuer}

    # Out of every group: no role left at all; the same groups again change nothing.
    oidc_on.set_user("erin", AT_PROVIDER, [])
    sign_in_through(Client(), oidc_on, "erin", AT_PROVIDER)
    sign_in_through(Client(), oidc_on, "erin", AT_PROVIDER)
    assert User.objects.get(username="erin").roles == []
    assert len(events(AuditAction.USER_ROLES_CHANGED)) == 2
    assert len(events(AuditAction.USER_CREATED)) == 1


def test_the_provider_takes_even_the_last_operators_role(oidc_on: Provider) -> None:
    oidc_on.set_user("fay", AT_PROVIDER, ["aimon-operators"])
    sign_in_through(Client(), oidc_on, "fay", AT_PROVIDER)
    assert list(User.objects.filter(groups__name=Role.OPERATOR)) == [User.objects.get(username="fay")]
    oidc_on.set_user("fay", AT_PROVIDER, ["aimon-approvers"])
    sign_in_through(Client(), oidc_on, "fay", AT_PROVIDER)
    assert User.objects.get(username="fay").roles == [Role.APPROVER]


@pytest.mark.parametrize("mode", ["tampered", "expired"])
def test_a_tampered_or_expired_id_token_is_refused(oidc_on: Provider, mode: str) -> None:
    oidc_on.set_user("gus", AT_PROVIDER, ["aimon-approvers"])
    oidc_on.id_token(mode)
    client = Client()
    response = sign_in_through(client, oidc_on, "gus", AT_PROVIDER)
    assert response.status_code == 302
    assert response["Location"] == reverse("accounts:login")
    assert texts(response) == [oidc.UNVERIFIED_MESSAGE.format(provider=PROVIDER_NAME)]
    assert signed_in_as(client) is None
    assert not User.objects.filter(username__startswith="gus").exists()
    [failed] = events(AuditAction.LOGIN_FAILED)
    assert failed.level == AuditLevel.WARNING
    assert failed.details["oidc_issuer"] == oidc_on.issuer
    expected = "Signature verification failed" if mode == "tampered" else "Signature has expired"
    assert expected in failed.details["reason"]
    # The sign-in page shows why, once.
    page = client.get(reverse("accounts:login"))
    assert oidc.UNVERIFIED_MESSAGE.format(provider=PROVIDER_NAME) in page.content.decode()


def test_a_claim_mapped_to_an_unknown_role_gives_none_and_says_why(oidc_on: Provider, settings: Any) -> None:
    settings.AIMON_OIDC_ROLE_MAP = {"aimon-admins": ["admin"], "aimon-auditors": ["auditor"]}
    oidc_on.set_user("hana", AT_PROVIDER, ["aimon-admins"])
    client = Client()
    response = sign_in_through(client, oidc_on, "hana", AT_PROVIDER)
    problem = UNKNOWN_ROLE.format(
        claim="groups", value="aimon-admins", role="admin", known="operator, approver, auditor"
    )
    assert texts(response) == [problem]
    assert signed_in_as(client) == "hana"
    assert User.objects.get(username="hana").roles == []
    [login] = events(AuditAction.LOGIN_SUCCEEDED)
    assert login.level == AuditLevel.WARNING
    assert login.details == {"oidc_issuer": oidc_on.issuer, "role_problems": [problem]}
    assert OidcIdentity.objects.get(user__username="hana").role_problems == [problem]


def test_the_people_page_shows_what_the_last_sign_in_gave_no_role_for(
    oidc_on: Provider, operator: User, settings: Any
) -> None:
    oidc_on.set_user("ivy", AT_PROVIDER, None)  # the provider sends no groups claim
    sign_in_through(Client(), oidc_on, "ivy", AT_PROVIDER)
    assert User.objects.get(username="ivy").roles == []
    page = Client()
    page.force_login(operator)
    html = page.get(reverse("accounts:person", args=["ivy"])).content.decode()
    assert f"{PROVIDER_NAME}, which gives their roles at each sign-in" in html
    assert CLAIM_MISSING.format(claim="groups").replace("'", "&#x27;") in html
    # Put right at the provider: the note goes at the next sign-in.
    oidc_on.set_user("ivy", AT_PROVIDER, ["aimon-approvers"])
    sign_in_through(Client(), oidc_on, "ivy", AT_PROVIDER)
    html = page.get(reverse("accounts:person", args=["ivy"])).content.decode()
    assert "data-role-problems" not in html


def test_a_provider_username_somebody_here_has_is_refused(oidc_on: Provider, approver: User) -> None:
    # Else whoever the provider calls "alice" would become this site's alice.
    oidc_on.set_user(approver.username, AT_PROVIDER, ["aimon-operators"])
    client = Client()
    response = sign_in_through(client, oidc_on, approver.username, AT_PROVIDER)
    message = OIDC_NAME_TAKEN_MESSAGE.format(provider=PROVIDER_NAME, username=approver.username)
    assert texts(response) == [message]
    assert signed_in_as(client) is None
    assert User.objects.get(pk=approver.pk).roles == [Role.APPROVER]
    assert not OidcIdentity.objects.exists()
    [failed] = events(AuditAction.LOGIN_FAILED)
    assert failed.subject == approver.username
    assert failed.details == {"oidc_issuer": oidc_on.issuer, "reason": f"refused: {message}"}


def test_a_deactivated_person_is_refused(oidc_on: Provider, operator: User) -> None:
    from aimon_admin.accounts.services import OIDC_DEACTIVATED_MESSAGE, user_deactivate
    from aimon_admin.core.actors import Actor

    oidc_on.set_user("jo", AT_PROVIDER, ["aimon-approvers"])
    sign_in_through(Client(), oidc_on, "jo", AT_PROVIDER)
    user_deactivate(user=User.objects.get(username="jo"), actor=Actor.for_user(operator))
    client = Client()
    response = sign_in_through(client, oidc_on, "jo", AT_PROVIDER)
    assert texts(response) == [OIDC_DEACTIVATED_MESSAGE]
    assert signed_in_as(client) is None


def test_the_sign_in_page_shows_the_button_beside_the_password_form(oidc_on: Provider) -> None:
    html = Client().get(reverse("accounts:login") + "?next=/audit/").content.decode()
    assert f"Sign in with {PROVIDER_NAME}" in html
    assert 'href="/accounts/oidc/start/?next=%2Faudit%2F"' in html
    assert 'name="password"' in html


def test_the_next_page_survives_the_trip_to_the_provider(oidc_on: Provider) -> None:
    client = Client()
    start = client.get("/accounts/oidc/start/?next=/audit/")
    assert start.status_code == 302
    assert client.session["oidc_login_next"] == "/audit/"


# --- Off, down, or answering garbage --------------------------------------------------------------


def test_without_a_provider_there_is_no_button_and_its_addresses_are_404(approver: User) -> None:
    client = Client()
    html = client.get(reverse("accounts:login")).content.decode()
    assert "Sign in with" not in html
    assert 'name="password"' in html
    assert client.get("/accounts/oidc/start/").status_code == 404
    assert client.get("/accounts/oidc/callback/?code=x&state=y").status_code == 404


def password_works(client: Client, user: User) -> None:
    response = client.post(reverse("accounts:login"), {"username": user.username, "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert signed_in_as(client) == user.username


def test_a_provider_that_is_down_is_said_on_the_sign_in_page_and_passwords_still_work(
    settings: Any, approver: User
) -> None:
    oidc_settings(settings, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    cache.clear()
    client = Client()
    response = client.get("/accounts/oidc/start/", follow=True)
    assert response.status_code == 200
    assert response.redirect_chain == [(reverse("accounts:login"), 302)]
    assert oidc.unreachable_message() in response.content.decode()
    assert oidc.PASSWORD_STILL_WORKS.strip() in response.content.decode()
    password_works(client, approver)


class Garbage(BaseHTTPRequestHandler):
    """A server at the provider's address that answers anything but OpenID Connect."""

    def do_GET(self) -> None:
        body = b"<html>it works</html>" if "openid-configuration" in self.path else b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def garbage() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Garbage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_provider_answering_garbage_is_said_on_the_sign_in_page(
    settings: Any, garbage: str, approver: User
) -> None:
    oidc_settings(settings, garbage)
    cache.clear()
    client = Client()
    response = client.get("/accounts/oidc/start/", follow=True)
    assert oidc.unreachable_message() in response.content.decode()
    # A callback with the provider still answering garbage: refused the same way, no 500.
    session = client.session
    session["oidc_states"] = {"s1": {"nonce": "n1", "code_verifier": "v" * 64, "added_on": 0}}
    session.save()
    response = client.get("/accounts/oidc/callback/?code=c1&state=s1", follow=True)
    assert response.status_code == 200
    assert oidc.unreachable_message() in response.content.decode()
    [failed] = events(AuditAction.LOGIN_FAILED)
    assert failed.details["oidc_issuer"] == garbage
    password_works(client, approver)


def test_a_callback_nobody_started_is_refused(oidc_on: Provider) -> None:
    client = Client()
    response = client.get("/accounts/oidc/callback/?code=c1&state=forged", follow=True)
    assert response.status_code == 200
    assert oidc.EXPIRED_MESSAGE in response.content.decode()
    assert signed_in_as(client) is None


def test_an_error_from_the_provider_is_said(oidc_on: Provider) -> None:
    response = Client().get("/accounts/oidc/callback/?error=access_denied&state=x", follow=True)
    message = oidc.NOT_FINISHED_MESSAGE.format(provider=PROVIDER_NAME, error="access_denied")
    assert message in response.content.decode()


# --- Password sign-in off ---------------------------------------------------------------------------


def test_with_password_sign_in_off_the_form_is_gone_and_its_post_refused(
    settings: Any, provider: Provider, approver: User
) -> None:
    oidc_settings(settings, provider.issuer, password=False)
    client = Client()
    html = client.get(reverse("accounts:login")).content.decode()
    assert f"Sign in with {PROVIDER_NAME}" in html
    assert 'name="password"' not in html
    response = client.post(reverse("accounts:login"), {"username": approver.username, "password": PASSWORD})
    assert response.status_code == 403
    assert oidc.PASSWORD_OFF_MESSAGE.format(provider=PROVIDER_NAME) in response.content.decode()
    assert signed_in_as(client) is None
    # Nor does Django's admin sign-in take a password: no backend checks one.
    response = client.post(
        "/django-admin/login/?next=/django-admin/", {"username": approver.username, "password": PASSWORD}
    )
    assert signed_in_as(client) is None
    # Through the provider, the same site signs people in.
    provider.set_user("lee", AT_PROVIDER, ["aimon-approvers"])
    provider.id_token("normal")
    sign_in_through(client, provider, "lee", AT_PROVIDER)
    assert signed_in_as(client) == "lee"


def test_with_password_sign_in_off_nobody_is_added_by_hand_and_no_link_is_made(
    settings: Any, operator: User, approver: User
) -> None:
    # A person added by hand could not sign in, and would hold the username the provider's
    # first sign-in needs; a set-password link would let nobody in.
    uidb64, token = user_password_link(user=approver, actor=TEST_ACTOR)  # made while passwords worked
    oidc_settings(settings, "http://127.0.0.1:9/unused", password=False)
    told = people_views.PEOPLE_FROM_PROVIDER_MESSAGE.format(provider=PROVIDER_NAME)
    client = Client()
    client.force_login(operator, backend="aimon_admin.accounts.oidc.OidcBackend")
    page = client.get(reverse("accounts:people")).content.decode()
    assert told in page
    assert reverse("accounts:person-create") not in page
    for response in (
        client.get(reverse("accounts:person-create")),
        client.post(reverse("accounts:person-create"), {"username": "newcomer", "roles": [Role.APPROVER]}),
    ):
        assert response.status_code == 302
        assert response["Location"] == reverse("accounts:people")
        assert texts(response)[-1] == told
    assert not User.objects.filter(username="newcomer").exists()
    links_before = len(events(AuditAction.USER_PASSWORD_LINK_ISSUED))
    response = client.post(reverse("accounts:person-link", args=[approver.username]))
    refused = LINKS_OFF_MESSAGE.format(provider=PROVIDER_NAME)
    assert texts(response)[-1] == refused
    assert len(events(AuditAction.USER_PASSWORD_LINK_ISSUED)) == links_before
    assert (
        "Make a set-password link"
        not in client.get(reverse("accounts:person", args=[approver.username])).content.decode()
    )
    # The link made before opens nothing and sets nothing.
    stranger = Client()
    response = stranger.post(
        reverse("accounts:set-password", args=[uidb64, token]),
        {"new_password1": "a new one 7Qp!", "new_password2": "a new one 7Qp!"},
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("accounts:login")
    assert texts(response) == [refused]
    approver.refresh_from_db()
    assert approver.check_password(PASSWORD)
