"""People who sign in to AIMON Admin. Their role is the group they belong to."""

from __future__ import annotations

from functools import cached_property

from django.contrib.auth.models import AbstractUser
from django.db import models

from aimon_admin.accounts.roles import Role

# The people pages' own address (/accounts/people/new/): no person may be called that.
RESERVED_USERNAMES = frozenset({"new"})


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


class OidcIdentity(models.Model):
    """Who a person is at an OpenID Connect provider: its issuer and their subject there (the
    `sub` claim, which the provider never reuses). A sign-in finds the person by this, never
    by a name or address the provider lets people change."""

    user = models.ForeignKey(User, on_delete=models.PROTECT, related_name="oidc_identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    # What the last sign-in's claims gave no role for and should have (policy.roles_from_claims).
    role_problems = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"],
                name="accounts_oidcidentity_one_person_per_subject",
                violation_error_message="This provider's subject already belongs to a person.",
            ),
            models.UniqueConstraint(
                fields=["user", "issuer"],
                name="accounts_oidcidentity_one_subject_per_person",
                violation_error_message="This person already has a subject at this provider.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
