"""Writes for accounts: people, their roles, and the record of their sign-ins."""

from __future__ import annotations

from collections.abc import Iterable

from axes.handlers.proxy import AxesProxyHandler
from django.apps import apps
from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.password_validation import validate_password
from django.contrib.auth.tokens import default_token_generator
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from aimon_admin.accounts.models import RESERVED_USERNAMES, OidcIdentity, User
from aimon_admin.accounts.policy import ClaimedRoles
from aimon_admin.accounts.roles import ROLE_PERMISSIONS, Role
from aimon_admin.accounts.selectors import (
    password_link_valid_hours,
    password_links_refusal,
)
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor

# What the audit log keeps of a username typed at sign-in (Django allows 150 characters).
TYPED_USERNAME_MAX = 64


LAST_OPERATOR_MESSAGE = (
    "{username} is the last active operator: make someone else an operator first, so somebody "
    "can still manage people and runtimes."
)
SELF_DEACTIVATE_MESSAGE = "You cannot deactivate yourself: ask another operator to do it."
# Sign-in through OpenID Connect: who the audit log says created or changed the person.
OIDC_ACTOR_LABEL = "openid-connect"
OIDC_NAME_TAKEN_MESSAGE = (
    "Somebody here already has the username {username!r}, so your {provider} account cannot sign in "
    "under it: ask an operator."
)
OIDC_NAME_INVALID_MESSAGE = (
    "{provider} gave the username {username!r}, which is not one this site accepts (letters, digits "
    "and @ . + - _, at most 150): ask an operator."
)
OIDC_DEACTIVATED_MESSAGE = "Your account here is deactivated: ask an operator."


class UserExistsError(ValueError):
    pass


class OidcSignInRefusedError(ValueError):
    """A sign-in through the provider this site turns away (the words are for the person;
    `username` is the one the provider gave)."""

    def __init__(self, message: str, *, username: str) -> None:
        super().__init__(message)
        self.username = username


class AccessChangeRefusedError(ValueError):
    """A change to a person's access that would leave nobody able to administer (the words
    are for the operator who tried)."""


def role_groups_sync(*, using: str = "default") -> None:
    """Make each role's group hold exactly its permissions (idempotent; run after migrate)."""
    for app_config in apps.get_app_configs():
        create_permissions(app_config, verbosity=0, using=using)
    for role, codenames in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.using(using).get_or_create(name=role)
        permissions = []
        for dotted in codenames:
            app_label, codename = dotted.split(".", 1)
            permissions.append(
                Permission.objects.using(using).get(content_type__app_label=app_label, codename=codename)
            )
        group.permissions.set(permissions)


def _role_groups(roles: list[str]) -> list[Group]:
    for role in roles:
        Role(role)  # refuses an unknown role with ValueError
    groups = list(Group.objects.filter(name__in=roles))
    if len(groups) != len(roles):
        role_groups_sync()
        groups = list(Group.objects.filter(name__in=roles))
    return groups


@transaction.atomic
def user_create(
    *,
    username: str,
    password: str | None,
    roles: Iterable[str],
    actor: Actor,
    email: str = "",
    oidc_issuer: str = "",
) -> User:
    """Create a person with the given roles. `password` None makes an unusable one;
    `oidc_issuer` names the provider whose sign-in made them."""
    roles = sorted(set(roles))
    groups = _role_groups(roles)
    if User.objects.filter(username__iexact=username).exists():
        raise UserExistsError(f"a user named {username!r} already exists")
    user = User(username=username, email=email)
    if password is None:
        user.set_unusable_password()
    else:
        validate_password(password, user=user)
        user.set_password(password)
    user.full_clean(exclude=["password"])
    user.save()
    user.groups.set(groups)
    audit_record(
        action=AuditAction.USER_CREATED,
        actor=actor,
        subject_type="user",
        subject=username,
        details={
            "roles": roles,
            "usable_password": password is not None,
            **({"oidc_issuer": oidc_issuer} if oidc_issuer else {}),
        },
    )
    return user


def _lock_operators_and(user: User) -> None:
    """Lock the active operators' rows and `user`'s, in one order, so that two operators
    removing each other at once wait for one another (PostgreSQL) rather than both passing
    the last-operator check, or deadlocking. SQLite runs writes one at a time anyway."""
    operators = User.objects.filter(groups__name=Role.OPERATOR, is_active=True).values("pk")
    locked = User.objects.select_for_update().filter(Q(pk=user.pk) | Q(pk__in=operators)).order_by("pk")
    list(locked.values_list("pk", flat=True))


def _keep_an_operator(user: User) -> None:
    """Refuse to take the last active operator away (call with the rows locked)."""
    if not (user.is_active and user.has_role(Role.OPERATOR)):
        return
    others = User.objects.filter(groups__name=Role.OPERATOR, is_active=True).exclude(pk=user.pk)
    if not others.exists():
        raise AccessChangeRefusedError(LAST_OPERATOR_MESSAGE.format(username=user.username))


@transaction.atomic
def user_set_roles(*, user: User, roles: Iterable[str], actor: Actor, oidc_issuer: str = "") -> None:
    """Give a person exactly these roles. The last active operator keeps theirs, unless the
    roles come from a sign-in through the provider `oidc_issuer`: the provider decides them
    (and can give them back), so its sign-in takes away even the last operator's."""
    roles = sorted(set(roles))
    groups = _role_groups(roles)
    user.__dict__.pop("roles", None)  # read them afresh, inside this transaction
    before = sorted(user.roles)
    if before == roles:
        return
    if Role.OPERATOR in before and Role.OPERATOR not in roles and not oidc_issuer:
        _lock_operators_and(user)
        user.refresh_from_db()
        _keep_an_operator(user)
    user.groups.set(groups)
    user.__dict__.pop("roles", None)  # the cached roles are stale now
    audit_record(
        action=AuditAction.USER_ROLES_CHANGED,
        actor=actor,
        subject_type="user",
        subject=user.username,
        details={"before": before, "after": roles, **({"oidc_issuer": oidc_issuer} if oidc_issuer else {})},
    )


@transaction.atomic
def oidc_person_sign_in(
    *, issuer: str, subject: str, username: str, email: str, claimed: ClaimedRoles, provider: str
) -> User:
    """The person a verified sign-in through the provider `issuer` is, with the roles its
    claims give them now (A1: a person it creates, and a change of roles, are events).

    Found by (issuer, subject) alone. Someone first seen is created, no password, under the
    username the provider gave, unless somebody here has it already: that sign-in is refused
    (else whoever the provider calls "olivia" would become this site's olivia). A deactivated
    person is refused. What the claims gave no role for is kept on their identity, for the
    people page."""
    identity = OidcIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
    actor = Actor.system(OIDC_ACTOR_LABEL)
    if identity is None:
        invalid = OIDC_NAME_INVALID_MESSAGE.format(provider=provider, username=username)
        if not username or len(username) > 150 or username.lower() in RESERVED_USERNAMES:
            raise OidcSignInRefusedError(invalid, username=username)
        try:
            UnicodeUsernameValidator()(username)
        except ValidationError:
            raise OidcSignInRefusedError(invalid, username=username) from None
        if User.objects.filter(username__iexact=username).exists():
            raise OidcSignInRefusedError(
                OIDC_NAME_TAKEN_MESSAGE.format(provider=provider, username=username), username=username
            )
        user = user_create(
            username=username,
            password=None,
            roles=claimed.roles,
            actor=actor,
            email=email,
            oidc_issuer=issuer,
        )
        OidcIdentity.objects.create(
            user=user, issuer=issuer, subject=subject, role_problems=list(claimed.problems)
        )
        return user
    user = identity.user
    if not user.is_active:
        raise OidcSignInRefusedError(OIDC_DEACTIVATED_MESSAGE, username=user.username)
    user_set_roles(user=user, roles=claimed.roles, actor=actor, oidc_issuer=issuer)
    if identity.role_problems != list(claimed.problems):
        identity.role_problems = list(claimed.problems)
        identity.save(update_fields=["role_problems"])
    return user


@transaction.atomic
def user_deactivate(*, user: User, actor: Actor) -> bool:
    """Stop a person signing in (their open sessions end at their next request). Never a
    deletion: their events, answers and grants keep naming them. Nobody deactivates
    themselves, nor the last active operator. False (nothing recorded) if already inactive."""
    if actor.user is not None and actor.user.pk == user.pk:
        raise AccessChangeRefusedError(SELF_DEACTIVATE_MESSAGE)
    _lock_operators_and(user)
    user = User.objects.get(pk=user.pk)
    if not user.is_active:
        return False
    _keep_an_operator(user)
    # Conditional, so two deactivations at once record one.
    if User.objects.filter(pk=user.pk, is_active=True).update(is_active=False) != 1:
        return False
    audit_record(
        action=AuditAction.USER_DEACTIVATED,
        actor=actor,
        level=AuditLevel.WARNING,
        subject_type="user",
        subject=user.username,
        details={"roles": sorted(user.roles)},
    )
    return True


@transaction.atomic
def user_reactivate(*, user: User, actor: Actor) -> bool:
    """Let a deactivated person sign in again, with the roles they had. False (nothing
    recorded) if already active."""
    if User.objects.filter(pk=user.pk, is_active=False).update(is_active=True) != 1:
        return False
    user.refresh_from_db()
    audit_record(
        action=AuditAction.USER_REACTIVATED,
        actor=actor,
        subject_type="user",
        subject=user.username,
        details={"roles": sorted(user.roles)},
    )
    return True


@transaction.atomic
def user_password_link(*, user: User, actor: Actor) -> tuple[str, str]:
    """A set-password link's two parts for an active person: (uidb64, token), Django's
    password-reset token. It works once (setting the password changes what the token was
    made from) and for password_link_valid_hours() hours; a sign-in since it was made ends it
    too. The audit event records that a link was made, never the token. None is made while
    password sign-in is off (AIMON_PASSWORD_SIGN_IN): it would let nobody in."""
    refusal = password_links_refusal()
    if refusal is not None:
        raise AccessChangeRefusedError(refusal)
    user = User.objects.get(pk=user.pk)
    if not user.is_active:
        raise AccessChangeRefusedError(f"{user.username} is deactivated: reactivate them first.")
    uidb64 = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    audit_record(
        action=AuditAction.USER_PASSWORD_LINK_ISSUED,
        actor=actor,
        subject_type="user",
        subject=user.username,
        details={"valid_hours": password_link_valid_hours(), "had_password": user.has_usable_password()},
    )
    return uidb64, token


@transaction.atomic
def user_set_password(*, user: User, password: str, actor: Actor) -> None:
    validate_password(password, user=user)
    user.set_password(password)
    user.save(update_fields=["password"])
    audit_record(
        action=AuditAction.USER_PASSWORD_CHANGED,
        actor=actor,
        subject_type="user",
        subject=user.username,
    )


@transaction.atomic
def login_record(*, user: User, oidc_issuer: str = "", role_problems: Iterable[str] = ()) -> None:
    """A sign-in: its last_login and its event, together (A3). One through the provider
    `oidc_issuer` names it, and is a warning when its claims gave no role where they should
    have (`role_problems`, policy.roles_from_claims): the operators' cue to fix the mapping."""
    user.last_login = timezone.now()
    user.save(update_fields=["last_login"])
    role_problems = list(role_problems)
    details: dict[str, object] = {"oidc_issuer": oidc_issuer} if oidc_issuer else {}
    if role_problems:
        details["role_problems"] = role_problems
    audit_record(
        action=AuditAction.LOGIN_SUCCEEDED,
        actor=Actor.for_user(user),
        level=AuditLevel.WARNING if role_problems else AuditLevel.INFO,
        subject_type="user",
        subject=user.username,
        details=details,
    )


def _typed_username(username: str) -> tuple[str, dict[str, int]]:
    """A username someone typed at sign-in, as the audit log keeps it: cut to
    TYPED_USERNAME_MAX characters (anyone can type anything there, no account needed), with
    the typed length in the details when it was cut."""
    if len(username) <= TYPED_USERNAME_MAX:
        return username, {}
    return username[: TYPED_USERNAME_MAX - 1] + "…", {"username_length": len(username)}


@transaction.atomic
def login_failure_record(*, username: str, oidc_issuer: str = "", reason: str = "") -> None:
    """A refused sign-in: a password one (the username as typed), or one through the provider
    `oidc_issuer` (the username it gave, if it got that far, and why it was refused)."""
    subject, details = _typed_username(username)
    if oidc_issuer:
        details = {**details, "oidc_issuer": oidc_issuer, "reason": reason}
    audit_record(
        action=AuditAction.LOGIN_FAILED,
        actor=Actor.system("anonymous"),
        level=AuditLevel.WARNING,
        subject_type="user",
        subject=subject,
        details=details,
    )


@transaction.atomic
def login_lockout_record(*, username: str, ip_address: str, failures: int | None) -> None:
    """A username+address pair locked out after repeated failed sign-ins (django-axes)."""
    subject, typed = _typed_username(username)
    audit_record(
        action=AuditAction.LOGIN_LOCKED_OUT,
        actor=Actor.system("anonymous"),
        level=AuditLevel.WARNING,
        subject_type="user",
        subject=subject,
        details={
            **typed,
            "ip_address": ip_address,
            "failures": failures,
            "failure_limit": settings.AXES_FAILURE_LIMIT,
            "lockout_minutes": int(settings.AXES_COOLOFF_TIME.total_seconds() // 60),
        },
    )


@transaction.atomic
def login_unlock(*, username: str, actor: Actor) -> int:
    """Clear a username's failed sign-ins from every address (an operator's unlock).

    Returns how many failure records were cleared; the unlock is audited either way.
    """
    count = AxesProxyHandler.reset_attempts(username=username)
    audit_record(
        action=AuditAction.LOGIN_UNLOCKED,
        actor=actor,
        subject_type="user",
        subject=username,
        details={"attempt_records_cleared": count},
    )
    return count


@transaction.atomic
def logout_record(*, user: User) -> None:
    audit_record(
        action=AuditAction.LOGOUT,
        actor=Actor.for_user(user),
        subject_type="user",
        subject=user.username,
    )
