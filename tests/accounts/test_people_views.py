"""The administration pages for people and locked sign-ins: operators only (approvers and
auditors get a 403), every change a POST with its audit event, then a redirect
(post/redirect/get), confirmation pages before a deactivation or an unlock."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from axes.models import AccessAttempt
from django.test import Client, override_settings
from django.urls import reverse

from aimon_admin.accounts import people_views
from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.accounts.services import LAST_OPERATOR_MESSAGE, SELF_DEACTIVATE_MESSAGE
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from tests.conftest import PASSWORD
from tests.core.prg_support import assert_invalid_post_redirects_and_reloads

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "a fresh passphrase for nina 9"
WRONG = "not the password at all 7"


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text(response) -> str:  # type: ignore[no-untyped-def]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def actions() -> list[str]:
    return list(AuditEvent.objects.order_by("seq").values_list("action", flat=True))


def sign_in(client: Client, username: str, password: str, ip: str = "10.0.0.1"):  # type: ignore[no-untyped-def]
    return client.post(
        reverse("accounts:login"), {"username": username, "password": password}, REMOTE_ADDR=ip
    )


PAGES = [
    ("accounts:people", []),
    ("accounts:person-create", []),
    ("accounts:person", ["alice"]),
    ("accounts:person-deactivate", ["alice"]),
    ("accounts:person-link", ["alice"]),
    ("accounts:locked", []),
    ("accounts:unlock", ["alice"]),
]


@pytest.mark.parametrize(("name", "args"), PAGES)
def test_operators_open_the_administration_pages_and_others_get_403(
    name: str, args: list[str], operator: User, approver: User, auditor: User
) -> None:
    path = reverse(name, args=args)
    assert signed_in(operator).get(path).status_code == 200
    for other in (approver, auditor):
        assert signed_in(other).get(path).status_code == 403, other.username
    assert Client().get(path)["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("accounts:person-create", []),
        ("accounts:person-roles", ["alice"]),
        ("accounts:person-deactivate", ["alice"]),
        ("accounts:person-reactivate", ["alice"]),
        ("accounts:person-link", ["alice"]),
        ("accounts:unlock", ["alice"]),
    ],
)
def test_no_other_role_changes_anything(name: str, args: list[str], approver: User, auditor: User) -> None:
    clients = [signed_in(other) for other in (approver, auditor)]
    before = actions()
    for client in clients:
        response = client.post(reverse(name, args=args), {"username": "x", "roles": ["operator"]})
        assert response.status_code == 403
    assert actions() == before
    assert User.objects.get(username="alice").is_active is True


def test_people_are_listed_with_roles_status_and_last_sign_in(
    operator: User, approver: User, auditor: User, make_user: Callable[..., User]
) -> None:
    gone = make_user("gus", Role.APPROVER)
    signed_in(operator).post(reverse("accounts:person-deactivate", args=["gus"]))
    page = text(signed_in(operator).get(reverse("accounts:people")))
    assert "alice Approver Active never" in page
    assert "audrey Auditor Active never" in page
    assert "gus Approver Deactivated never" in page
    assert page.index("olivia") < page.index("gus")  # active people first
    assert gone.pk


def test_adding_a_person_shows_a_one_time_link_that_sets_their_password(operator: User) -> None:
    client = signed_in(operator)
    response = client.post(
        reverse("accounts:person-create"), {"username": "nina", "email": "", "roles": [Role.APPROVER]}
    )
    assert response["Location"] == reverse("accounts:person-link", args=["nina"])
    nina = User.objects.get(username="nina")
    assert (nina.roles, nina.has_usable_password()) == ([Role.APPROVER], False)

    shown = client.get(response["Location"])
    assert shown["Cache-Control"] == "no-store"
    [link] = re.findall(r'value="(http://testserver/accounts/set-password/[^"]+)"', shown.content.decode())
    assert people_views.LINK_ALREADY_SHOWN_MESSAGE in client.get(response["Location"]).content.decode()
    assert actions()[-2:] == [AuditAction.USER_CREATED, AuditAction.USER_PASSWORD_LINK_ISSUED]

    # Nina opens it (Django moves the token into her session and drops it from the address).
    visitor = Client()
    form_page = visitor.get(link, follow=True)
    assert "Set your password" in form_page.content.decode()
    assert "nina" in form_page.content.decode()
    done = visitor.post(
        form_page.redirect_chain[-1][0], {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}
    )
    assert done["Location"] == reverse("accounts:login")
    event = AuditEvent.objects.filter(action=AuditAction.USER_PASSWORD_CHANGED).get()
    assert (event.actor_label, event.subject) == ("nina", "nina")
    assert sign_in(Client(), "nina", NEW_PASSWORD).status_code == 302
    # Used once: the same link no longer works.
    again = Client().get(link, follow=True)
    assert "This link does not work any more" in again.content.decode()


def test_a_weak_password_is_refused_on_the_link_page_naming_why(operator: User) -> None:
    client = signed_in(operator)
    client.post(reverse("accounts:person-create"), {"username": "nina", "roles": [Role.APPROVER]})
    link = re.findall(
        r'value="(http://testserver[^"]+)"',
        client.get(reverse("accounts:person-link", args=["nina"])).content.decode(),
    )[0]
    visitor = Client()
    page = visitor.get(link, follow=True)
    # Post/redirect/get: the reasons shown again on a reload; no password kept.
    form_page = page.redirect_chain[-1][0]
    shown = assert_invalid_post_redirects_and_reloads(
        visitor,
        form_page,
        {"new_password1": "12345678", "new_password2": "12345678"},
        page=form_page,
        shows=["This password is entirely numeric."],
    )
    assert "12345678" not in shown
    assert not User.objects.get(username="nina").has_usable_password()


def test_a_username_taken_or_reserved_is_refused_with_the_form_kept(operator: User, approver: User) -> None:
    client = signed_in(operator)
    for name, says in (("ALICE", "Somebody already has this username"), ("new", "names one of these pages")):
        # Post/redirect/get: kept on a reload too.
        assert_invalid_post_redirects_and_reloads(
            client,
            reverse("accounts:person-create"),
            {"username": name, "email": "x@example.com"},
            page=reverse("accounts:person-create"),
            shows=[says, 'value="x@example.com"', f'value="{name}"'],
        )
    assert User.objects.count() == 2


def test_roles_change_is_saved_and_audited(operator: User, approver: User) -> None:
    response = signed_in(operator).post(
        reverse("accounts:person-roles", args=["alice"]), {"roles": [Role.APPROVER, Role.AUDITOR]}
    )
    assert response["Location"] == reverse("accounts:person", args=["alice"])
    assert User.objects.get(username="alice").roles == [Role.APPROVER, Role.AUDITOR]
    assert actions()[-1] == AuditAction.USER_ROLES_CHANGED


def test_the_last_operator_cannot_drop_their_role_and_is_told_why(operator: User) -> None:
    # Post/redirect/get: the roles as sent and why, on a reload too.
    page = assert_invalid_post_redirects_and_reloads(
        signed_in(operator),
        reverse("accounts:person-roles", args=["olivia"]),
        {"roles": [Role.AUDITOR]},
        page=reverse("accounts:person", args=["olivia"]),
        shows=[LAST_OPERATOR_MESSAGE.format(username="olivia")],
    )
    assert re.search(rf'value="{Role.AUDITOR}"[^>]*checked', page)
    assert not re.search(rf'value="{Role.OPERATOR}"[^>]*checked', page)
    assert User.objects.get(username="olivia").roles == [Role.OPERATOR]


def test_deactivate_confirms_first_then_posts_and_redirects(operator: User, approver: User) -> None:
    client = signed_in(operator)
    path = reverse("accounts:person-deactivate", args=["alice"])
    page = client.get(path).content.decode()
    assert 'class="card narrow confirm"' in page
    assert "Nothing of theirs is deleted" in page
    assert User.objects.get(username="alice").is_active is True

    response = client.post(path)
    assert response["Location"] == reverse("accounts:person", args=["alice"])
    assert User.objects.get(username="alice").is_active is False
    person = text(client.get(response["Location"]))
    assert "Deactivated: cannot sign in" in person
    assert "Reactivate" in person

    back = client.post(reverse("accounts:person-reactivate", args=["alice"]))
    assert back["Location"] == reverse("accounts:person", args=["alice"])
    assert User.objects.get(username="alice").is_active is True
    assert actions()[-2:] == [AuditAction.USER_DEACTIVATED, AuditAction.USER_REACTIVATED]


def test_an_operator_is_told_they_cannot_deactivate_themselves(operator: User, make_user: Callable) -> None:
    make_user("oscar", Role.OPERATOR)
    client = signed_in(operator)
    path = reverse("accounts:person-deactivate", args=["olivia"])
    page = client.get(path).content.decode()
    assert SELF_DEACTIVATE_MESSAGE in page
    assert "<form" not in page.split('class="card narrow confirm"')[1]
    response = client.post(path, follow=True)
    assert SELF_DEACTIVATE_MESSAGE in response.content.decode()
    assert User.objects.get(username="olivia").is_active is True


@override_settings(AXES_FAILURE_LIMIT=2)
def test_locked_sign_ins_are_listed_and_unlocked_after_a_confirmation(operator: User, approver: User) -> None:
    for _ in range(2):
        sign_in(Client(), "alice", WRONG, ip="10.0.0.7")
    sign_in(Client(), "ghost", WRONG, ip="10.0.0.8")  # one failure: not locked
    assert sign_in(Client(), "alice", PASSWORD, ip="10.0.0.7").status_code == 429  # counted too

    client = signed_in(operator)
    listed = text(client.get(reverse("accounts:locked")))
    assert "alice 10.0.0.7 3 failures, the last " in listed
    assert "ghost" not in listed
    assert "1 locked sign-in" in text(client.get(reverse("accounts:people")))

    path = reverse("accounts:unlock", args=["alice"])
    confirm = text(client.get(path))
    assert "Unlock sign-in for alice?" in confirm
    assert "Locked from 10.0.0.7" in confirm
    response = client.post(path)
    assert response["Location"] == reverse("accounts:locked")
    assert not AccessAttempt.objects.filter(username="alice").exists()
    event = AuditEvent.objects.filter(action=AuditAction.LOGIN_UNLOCKED).get()
    assert (event.actor, event.subject) == (operator, "alice")
    assert sign_in(Client(), "alice", PASSWORD, ip="10.0.0.7").status_code == 302


@override_settings(AXES_FAILURE_LIMIT=2)
def test_the_lockout_page_points_to_the_operators_unlock_page(approver: User) -> None:
    for _ in range(2):
        sign_in(Client(), "alice", WRONG)
    page = text(sign_in(Client(), "alice", WRONG))
    assert "ask an operator, who can unlock it on their Locked sign-ins page" in page
    assert "manage.py" not in page
