"""Permission checks are Django's own ModelBackend's, behind axes: a person holds their roles'
permissions and their own, an inactive person none, a superuser every one, and a check on
one object grants nothing (S13: who may answer is checked by permission and by role)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group, Permission

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import ROLE_PERMISSIONS, Role

pytestmark = pytest.mark.django_db


def fresh(user: User) -> User:
    """The person as a request loads them: nothing cached."""
    return User.objects.get(pk=user.pk)


def test_a_permission_check_answers_by_the_persons_permissions_and_roles(approver: User) -> None:
    # S13: who may answer, checked by permission and by role
    user = fresh(approver)
    assert user.has_perm("approvals.answer_approvalrequest")
    assert not user.has_perm("runtimes.view_agentruntime")
    assert user.has_role(Role.APPROVER)
    assert not user.has_role(Role.OPERATOR)


def test_a_role_read_first_still_lets_the_permissions_be_read(operator: User) -> None:
    user = fresh(operator)
    assert user.roles == [Role.OPERATOR]
    assert user.has_perm("approvals.add_skillrule")
    assert user.roles == [Role.OPERATOR]


@pytest.mark.parametrize("who", ["operator", "approver", "auditor", "direct", "empty_group", "nobody"])
def test_the_permissions_are_the_roles_and_the_persons_own(
    who: str, make_user: Callable[..., User], request: pytest.FixtureRequest
) -> None:
    if who == "direct":  # a permission of the person's own, no role
        user = make_user("dora")
        user.user_permissions.add(Permission.objects.get(codename="view_auditevent"))
        expected = {"audit.view_auditevent"}
    elif who == "empty_group":  # a group with no permission: a name only
        user = make_user("eve", Role.APPROVER)
        user.groups.add(Group.objects.create(name="readers"))
        expected = set(ROLE_PERMISSIONS[Role.APPROVER])
    elif who == "nobody":
        user = make_user("nemo")
        expected = set()
    else:
        user = request.getfixturevalue(who)
        expected = set(ROLE_PERMISSIONS[who])
    assert fresh(user).get_all_permissions() == expected
    assert fresh(user).roles == (
        [] if who in ("direct", "nobody") else [Role.APPROVER if who == "empty_group" else who]
    )


def test_an_inactive_person_has_no_permission(approver: User) -> None:
    User.objects.filter(pk=approver.pk).update(is_active=False)
    user = fresh(approver)
    assert not user.has_perm("approvals.answer_approvalrequest")
    assert user.get_all_permissions() == set()


def test_a_superuser_has_every_permission(make_user: Callable[..., User]) -> None:
    user = make_user("root")
    User.objects.filter(pk=user.pk).update(is_superuser=True)
    assert len(fresh(user).get_all_permissions()) == Permission.objects.count()


def test_a_check_on_one_object_grants_nothing(approver: User) -> None:
    # Object permissions are nobody's here: a check on one object is refused.
    user = fresh(approver)
    assert not user.has_perm("approvals.answer_approvalrequest", obj=approver)
    assert user.get_all_permissions(obj=approver) == set()
