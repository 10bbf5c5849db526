"""Sign-in and permissions: Django's ModelBackend, with a person's access read in one query."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission
from django.db.models import CharField, Value

from aimon_admin.accounts.models import User, roles_named

# The cached access on the user object: one request's user, as ModelBackend's own caches are.
_ACCESS_CACHE = "_access_cache"


@dataclass(frozen=True)
class _Access:
    user_permissions: frozenset[str]
    group_permissions: frozenset[str]


class AccessModelBackend(ModelBackend):
    """ModelBackend whose permission checks read the person's own permissions, their groups'
    permissions and their groups (their roles) in one query, instead of one query for each.

    The same rows, the same rules: an inactive person has no permission, a superuser every
    one (read as ModelBackend reads it), and what was read holds for this user object only,
    as ModelBackend's caches do (each request loads its user afresh).
    """

    def get_user_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        access = _access(user_obj, obj)
        return set(access.user_permissions) if access else super().get_user_permissions(user_obj, obj)

    def get_group_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        access = _access(user_obj, obj)
        return set(access.group_permissions) if access else super().get_group_permissions(user_obj, obj)


def _access(user_obj: Any, obj: Any) -> _Access | None:
    """The person's access, read once; None where ModelBackend's own reading applies (no
    person, an inactive one, a superuser, a per-object check)."""
    if obj is not None or user_obj.is_anonymous or not user_obj.is_active or user_obj.is_superuser:
        return None
    if not isinstance(user_obj, User):
        return None
    cached = getattr(user_obj, _ACCESS_CACHE, None)
    if cached is not None:
        return cached
    source = CharField()
    through_groups = (
        Group.objects.filter(user=user_obj)
        .order_by()
        .values_list(
            Value("group", output_field=source),
            "name",
            "permissions__content_type__app_label",
            "permissions__codename",
        )
    )
    own = (
        Permission.objects.filter(user=user_obj)
        .order_by()
        .values_list(
            Value("user", output_field=source),
            Value("", output_field=source),
            "content_type__app_label",
            "codename",
        )
    )
    group_names: set[str] = set()
    user_permissions: set[str] = set()
    group_permissions: set[str] = set()
    for kind, group, app_label, codename in through_groups.union(own, all=True):
        if kind == "group":
            group_names.add(group)
            if codename is not None:
                group_permissions.add(f"{app_label}.{codename}")
        else:
            user_permissions.add(f"{app_label}.{codename}")
    access = _Access(frozenset(user_permissions), frozenset(group_permissions))
    setattr(user_obj, _ACCESS_CACHE, access)
    # The roles are the groups just read: has_role() needs no query of its own.
    user_obj.__dict__.setdefault("roles", roles_named(group_names))
    return access
