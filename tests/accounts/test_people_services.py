"""People administered by operators: deactivated and reactivated, never deleted; roles
changed; set-password links; the last operator kept. Each change is a row and its audit
event (A1, A3)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.tokens import default_token_generator
from django.test import Client
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.accounts.services import (
    LAST_OPERATOR_MESSAGE,
    SELF_DEACTIVATE_MESSAGE,
    AccessChangeRefusedError,
    user_deactivate,
    user_password_link,
    user_reactivate,
    user_set_roles,
)
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from tests.conftest import PASSWORD, TEST_ACTOR

pytestmark = pytest.mark.django_db


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("seq"))


def fresh(user: User) -> User:
    return User.objects.get(pk=user.pk)


def signs_in(username: str) -> bool:
    response = Client().post("/accounts/login/", {"username": username, "password": PASSWORD})
    return response.status_code == 302


def test_deactivate_keeps_the_row_and_records_who(approver: User, operator: User) -> None:
    assert user_deactivate(user=approver, actor=Actor.for_user(operator)) is True
    approver = fresh(approver)
    assert approver.is_active is False
    assert approver.roles == [Role.APPROVER]  # kept, for a reactivation
    [event] = events(AuditAction.USER_DEACTIVATED)
    assert (event.actor, event.subject, event.level, event.details) == (
        operator,
        "alice",
        AuditLevel.WARNING,
        {"roles": ["approver"]},
    )


def test_a_deactivated_person_cannot_sign_in_and_their_session_ends(approver: User, operator: User) -> None:
    client = Client()
    client.force_login(approver)
    assert client.get("/").status_code == 200
    user_deactivate(user=approver, actor=Actor.for_user(operator))
    assert client.get("/")["Location"] == "/accounts/login/?next=/"
    assert not signs_in("alice")


def test_deactivating_twice_records_once(approver: User, operator: User) -> None:
    user_deactivate(user=approver, actor=Actor.for_user(operator))
    assert user_deactivate(user=approver, actor=Actor.for_user(operator)) is False
    assert len(events(AuditAction.USER_DEACTIVATED)) == 1


def test_reactivate_lets_them_in_with_their_roles(approver: User, operator: User) -> None:
    user_deactivate(user=approver, actor=Actor.for_user(operator))
    assert user_reactivate(user=approver, actor=Actor.for_user(operator)) is True
    assert fresh(approver).is_active is True
    assert signs_in("alice")
    [event] = events(AuditAction.USER_REACTIVATED)
    assert (event.actor, event.subject, event.details) == (operator, "alice", {"roles": ["approver"]})
    assert user_reactivate(user=approver, actor=Actor.for_user(operator)) is False
    assert len(events(AuditAction.USER_REACTIVATED)) == 1


def test_nobody_deactivates_themselves(operator: User, make_user: Callable[..., User]) -> None:
    make_user("oscar", Role.OPERATOR)
    with pytest.raises(AccessChangeRefusedError, match=SELF_DEACTIVATE_MESSAGE):
        user_deactivate(user=operator, actor=Actor.for_user(operator))
    assert fresh(operator).is_active is True
    assert not events(AuditAction.USER_DEACTIVATED)


def test_the_last_active_operator_is_never_deactivated(operator: User) -> None:
    with pytest.raises(AccessChangeRefusedError) as refused:
        user_deactivate(user=operator, actor=TEST_ACTOR)
    assert str(refused.value) == LAST_OPERATOR_MESSAGE.format(username="olivia")
    assert fresh(operator).is_active is True


def test_the_last_active_operator_keeps_the_role(operator: User, make_user: Callable[..., User]) -> None:
    with pytest.raises(AccessChangeRefusedError, match="last active operator"):
        user_set_roles(user=operator, roles=[Role.AUDITOR], actor=TEST_ACTOR)
    assert fresh(operator).roles == [Role.OPERATOR]
    assert not events(AuditAction.USER_ROLES_CHANGED)
    # A deactivated operator does not count: they cannot sign in to administer anything.
    other = make_user("oscar", Role.OPERATOR)
    user_deactivate(user=other, actor=Actor.for_user(operator))
    with pytest.raises(AccessChangeRefusedError):
        user_set_roles(user=operator, roles=[], actor=TEST_ACTOR)
    user_reactivate(user=other, actor=Actor.for_user(operator))
    user_set_roles(user=operator, roles=[Role.AUDITOR], actor=Actor.for_user(other))
    assert fresh(operator).roles == [Role.AUDITOR]


def test_with_two_operators_one_may_deactivate_the_other(
    operator: User, make_user: Callable[..., User]
) -> None:
    other = make_user("oscar", Role.OPERATOR)
    assert user_deactivate(user=other, actor=Actor.for_user(operator)) is True
    # Now olivia is the last one: oscar (inactive) cannot act, and nobody can remove her.
    with pytest.raises(AccessChangeRefusedError):
        user_deactivate(user=operator, actor=TEST_ACTOR)


def test_a_set_password_link_works_once_and_records_no_token(operator: User, make_user: Callable) -> None:
    newcomer = User.objects.create(username="nina")
    newcomer.set_unusable_password()
    newcomer.save()

    uidb64, token = user_password_link(user=newcomer, actor=Actor.for_user(operator))

    assert uidb64 == urlsafe_base64_encode(force_bytes(newcomer.pk))
    assert default_token_generator.check_token(newcomer, token)
    [event] = events(AuditAction.USER_PASSWORD_LINK_ISSUED)
    assert (event.actor, event.subject) == (operator, "nina")
    assert event.details == {"valid_hours": 72, "had_password": False}
    assert token not in str(event.content())
    newcomer.set_password(PASSWORD)  # what the link's page does, through user_set_password
    assert not default_token_generator.check_token(newcomer, token)


def test_a_deactivated_person_gets_no_link(approver: User, operator: User) -> None:
    user_deactivate(user=approver, actor=Actor.for_user(operator))
    with pytest.raises(AccessChangeRefusedError, match="reactivate them first"):
        user_password_link(user=approver, actor=Actor.for_user(operator))
    assert not events(AuditAction.USER_PASSWORD_LINK_ISSUED)
