"""Roles are groups with permissions; the sign-in record reaches the audit log."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import ROLE_PERMISSIONS, Role
from aimon_admin.accounts.services import role_groups_sync, user_set_roles
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from tests.conftest import PASSWORD, TEST_ACTOR

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role", Role.values)
def test_each_role_group_holds_exactly_its_permissions(role: str) -> None:
    group = Group.objects.get(name=role)
    granted = {
        f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.select_related("content_type")
    }
    assert granted == set(ROLE_PERMISSIONS[role])


def test_role_groups_sync_restores_a_tampered_group() -> None:
    group = Group.objects.get(name=Role.AUDITOR)
    group.permissions.clear()
    role_groups_sync()
    assert group.permissions.count() == len(ROLE_PERMISSIONS[Role.AUDITOR])


def test_auditor_may_view_but_not_change_runtimes(auditor: User) -> None:
    assert auditor.has_perm("runtimes.view_agentruntime")
    assert auditor.has_perm("audit.view_auditevent")
    assert not auditor.has_perm("runtimes.change_agentruntime")
    assert not auditor.has_perm("runtimes.add_runtimetoken")


def test_approver_has_no_operator_permissions(approver: User) -> None:
    assert not approver.has_perm("runtimes.view_agentruntime")
    assert not approver.has_perm("runtimes.change_agentruntime")


def test_changing_roles_is_audited_with_before_and_after(approver: User) -> None:
    # A1: role changes are events.
    user_set_roles(user=approver, roles=[Role.APPROVER, Role.AUDITOR], actor=TEST_ACTOR)
    approver = User.objects.get(pk=approver.pk)
    assert approver.roles == ["approver", "auditor"]
    event = AuditEvent.objects.get(action=AuditAction.USER_ROLES_CHANGED)
    assert event.details == {"before": ["approver"], "after": ["approver", "auditor"]}


def test_setting_the_same_roles_records_nothing(approver: User) -> None:
    before = AuditEvent.objects.count()
    user_set_roles(user=approver, roles=[Role.APPROVER], actor=TEST_ACTOR)
    assert AuditEvent.objects.count() == before


def test_unknown_role_is_refused(approver: User) -> None:
    with pytest.raises(ValueError, match="superuser"):
        user_set_roles(user=approver, roles=["superuser"], actor=TEST_ACTOR)


def test_failed_login_is_a_warning_event_without_the_password(client: Client, approver: User) -> None:
    # A1: failed logins are events; never a secret in them.
    # Post/redirect/get to the sign-in page's own address (no draft in it): the page says
    # so once, with the username kept, never the password, and the attempts left before a
    # pause; a reload shows a fresh form and counts nothing.
    url = "/accounts/login/?next=/audit/"
    response = client.post(url, {"username": "alice", "password": "wrong guess 1", "next": "/audit/"})
    assert response.status_code == 303
    assert response["Location"] == url
    shown = html.unescape(client.get(url).content.decode())
    for text in ("correct username and password", 'value="alice"', 'name="next" value="/audit/"'):
        assert text in shown, text
    assert "4 more failed attempts pause sign-in for this username from your address for 15 minutes." in shown
    assert "wrong guess" not in shown
    reloaded = html.unescape(client.get(url).content.decode())
    assert "correct username and password" not in reloaded
    event = AuditEvent.objects.get(action=AuditAction.LOGIN_FAILED)
    assert event.level == "WARNING"
    assert event.subject == "alice"
    assert event.channel == "BROWSER"
    assert "wrong guess" not in str(event.content())


def test_the_last_attempt_before_a_pause_is_announced(client: Client, approver: User, settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(2):
        client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
    shown = html.unescape(client.get("/accounts/login/").content.decode())
    assert "1 more failed attempt pauses sign-in for this username from your address" in shown
    locked = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
    assert locked.status_code == 429


def test_login_and_logout_are_recorded(client: Client, approver: User) -> None:
    response = client.post("/accounts/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == "/"
    client.post("/accounts/logout/")
    actions = list(AuditEvent.objects.filter(actor=approver).order_by("seq").values_list("action", flat=True))
    assert actions == [AuditAction.LOGIN_SUCCEEDED, AuditAction.LOGOUT]
