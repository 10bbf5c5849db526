"""People who sign in to AIMON Admin. Their role is the group they belong to."""

from __future__ import annotations

from functools import cached_property

from django.contrib.auth.models import AbstractUser

from aimon_admin.accounts.roles import Role


class User(AbstractUser):
    """A person: operator, approver (end user) or auditor. Deactivated, never deleted."""

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"

    @cached_property
    def roles(self) -> list[str]:
        names = {group.name for group in self.groups.all()}
        return [role for role in Role.values if role in names]

    def has_role(self, role: str) -> bool:
        return role in self.roles
