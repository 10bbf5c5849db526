"""Permission checks read a person's access in one query, and answer as Django's own
ModelBackend does (the answer click's sign-in and permissions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission

from aimon_admin.accounts.backends import AccessModelBackend
from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role

pytestmark = pytest.mark.django_db


def fresh(user: User) -> User:
    """The person as a request loads them: nothing cached."""
    return User.objects.get(pk=user.pk)


def test_a_permission_check_reads_permissions_and_roles_in_one_query(
    approver: User, django_assert_num_queries: Callable[..., Any]
) -> None:  # S13: who may answer, checked by permission and by role
    user = fresh(approver)
    with django_assert_num_queries(1):
        assert user.has_perm("approvals.answer_approvalrequest")
        assert not user.has_perm("runtimes.view_agentruntime")
        assert user.has_role(Role.APPROVER)
        assert not user.has_role(Role.OPERATOR)


def test_a_role_read_first_still_lets_the_permissions_be_read(
    operator: User, django_assert_num_queries: Callable[..., Any]
) -> None:
    user = fresh(operator)
    with django_assert_num_queries(2):
        assert user.roles == [Role.OPERATOR]
        assert user.has_perm("approvals.add_skillrule")
    assert user.roles == [Role.OPERATOR]


@pytest.mark.parametrize("who", ["operator", "approver", "auditor", "direct", "empty_group", "nobody"])
def test_the_permissions_are_those_django_reads(
    who: str, make_user: Callable[..., User], request: pytest.FixtureRequest
) -> None:
    if who == "direct":  # a permission of the person's own, no role
        user = make_user("dora")
        user.user_permissions.add(Permission.objects.get(codename="view_auditevent"))
    elif who == "empty_group":  # a group with no permission: a name only
        user = make_user("eve", Role.APPROVER)
        user.groups.add(Group.objects.create(name="readers"))
    elif who == "nobody":
        user = make_user("nemo")
    else:
        user = request.getfixturevalue(who)
    ours, django = AccessModelBackend(), ModelBackend()
    assert ours.get_user_permissions(fresh(user)) == django.get_user_permissions(fresh(user))
    assert ours.get_group_permissions(fresh(user)) == django.get_group_permissions(fresh(user))
    assert ours.get_all_permissions(fresh(user)) == django.get_all_permissions(fresh(user))
    loaded = fresh(user)
    ours.get_all_permissions(loaded)
    assert loaded.roles == fresh(user).roles


def test_an_inactive_person_has_no_permission(approver: User) -> None:
    User.objects.filter(pk=approver.pk).update(is_active=False)
    user = fresh(approver)
    assert not user.has_perm("approvals.answer_approvalrequest")
    assert AccessModelBackend().get_all_permissions(user) == set()


def test_a_superuser_has_every_permission_as_django_reads_it(make_user: Callable[..., User]) -> None:
    user = make_user("root")
    User.objects.filter(pk=user.pk).update(is_superuser=True)
    assert AccessModelBackend().get_all_permissions(fresh(user)) == ModelBackend().get_all_permissions(
        fresh(user)
    )
    assert len(AccessModelBackend().get_all_permissions(fresh(user))) == Permission.objects.count()


def test_a_check_on_one_object_reads_nothing(approver: User) -> None:
    # As ModelBackend: object permissions are not this backend's.
    assert AccessModelBackend().get_all_permissions(fresh(approver), obj=approver) == set()
