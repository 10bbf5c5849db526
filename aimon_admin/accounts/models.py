"""People who sign in to AIMON Admin. Their role is the group they belong to."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property

from django.contrib.auth.models import AbstractUser

from aimon_admin.accounts.roles import Role


class User(AbstractUser):
    """A person: operator, approver (end user) or auditor. Deactivated, never deleted."""

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"

    @cached_property
    def roles(self) -> list[str]:
        return roles_named({group.name for group in self.groups.all()})

    def has_role(self, role: str) -> bool:
        return role in self.roles


def roles_named(group_names: Iterable[str]) -> list[str]:
    """The roles among these group names, in the roles' own order."""
    names = set(group_names)
    return [role for role in Role.values if role in names]
