"""Sign-in and permissions: Django's ModelBackend, with a person and their access read in one
query."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import ValidationError
from django.db import router
from django.db.models import CharField, QuerySet, Value

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

    def get_user(self, user_id: Any) -> User | None:
        """The signed-in person of a request (AuthenticationMiddleware's read) with their
        access, in one query: their row repeated beside each access row. The same person
        ModelBackend's get_user gives (None if gone or inactive)."""
        fields = [field.attname for field in User._meta.concrete_fields]
        try:
            rows = _access_rows(User._default_manager.filter(pk=user_id), fields)
        except (TypeError, ValueError, ValidationError):  # a session holding a malformed id
            return None
        if not rows:
            return None
        width = len(fields)
        user = User.from_db(router.db_for_read(User), fields, rows[0][:width])
        if not self.user_can_authenticate(user):
            return None
        if not user.is_superuser:
            _keep_access(user, (row[width:] for row in rows))
        return user


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
    rows = _access_rows(User._default_manager.filter(pk=user_obj.pk), ())
    _keep_access(user_obj, ((kind, group, app, code) for kind, group, app, code in rows))
    return getattr(user_obj, _ACCESS_CACHE)


def _access_rows(people: QuerySet[User], fields: Sequence[str]) -> list[tuple[Any, ...]]:
    """One query: for each of the person's groups and each of its permissions a row, and for
    each of their own permissions a row, each row starting with the person's `fields` and
    ending with (kind, group name, app label, codename); the joins are outer, so a person
    with no group or no permission still gives rows (their names None)."""
    source = CharField()
    people = people.order_by()
    through_groups = people.values_list(
        *fields,
        Value("group", output_field=source),
        "groups__name",
        "groups__permissions__content_type__app_label",
        "groups__permissions__codename",
    )
    own = people.values_list(
        *fields,
        Value("user", output_field=source),
        Value("", output_field=source),
        "user_permissions__content_type__app_label",
        "user_permissions__codename",
    )
    return list(through_groups.union(own, all=True))


def _keep_access(user_obj: User, rows: Iterable[tuple[str, str | None, str | None, str | None]]) -> None:
    """Keep the access these rows give on the user object, its roles too (has_role() then
    needs no query of its own)."""
    group_names: set[str] = set()
    user_permissions: set[str] = set()
    group_permissions: set[str] = set()
    for kind, group, app_label, codename in rows:
        if kind == "group":
            if group is not None:
                group_names.add(group)
            if codename is not None:
                group_permissions.add(f"{app_label}.{codename}")
        elif codename is not None:
            user_permissions.add(f"{app_label}.{codename}")
    setattr(user_obj, _ACCESS_CACHE, _Access(frozenset(user_permissions), frozenset(group_permissions)))
    user_obj.__dict__.setdefault("roles", roles_named(group_names))
