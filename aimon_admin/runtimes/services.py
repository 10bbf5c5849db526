"""Writes for agent runtimes and their tokens, each with its audit event (A1, A3)."""

from __future__ import annotations

from types import EllipsisType

from django.db import transaction
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.core.choices import SideEffectLevel
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.tokens import token_generate, token_hash, token_prefix

TOKEN_ALREADY_REVOKED_MESSAGE = "This token was already revoked."  # noqa: S105 - not a secret # nosec B105
RUNTIME_RETIRED_MESSAGE = "This runtime is retired: it cannot be changed, enabled or given tokens any more."


class RuntimeExistsError(ValueError):
    pass


class TokenAlreadyRevokedError(ValueError):
    pass


class RuntimeRetiredError(ValueError):
    """The runtime is retired: nothing about it changes any more."""

    def __init__(self, message: str = RUNTIME_RETIRED_MESSAGE) -> None:
        super().__init__(message)


def _settings_snapshot(runtime: AgentRuntime) -> dict[str, str | int | None]:
    return {
        "ceiling": runtime.ceiling,
        "exempt_at_or_below": runtime.exempt_at_or_below,
        "owner": runtime.owner.username if runtime.owner else None,
        "description": runtime.description,
        "escalate_after_seconds": runtime.escalate_after_seconds,
    }


@transaction.atomic
def runtime_create(
    *,
    name: str,
    actor: Actor,
    ceiling: str = SideEffectLevel.MUTATING,
    exempt_at_or_below: str = SideEffectLevel.READ_ONLY,
    owner: User | None = None,
    description: str = "",
    escalate_after_seconds: int | None = None,
) -> AgentRuntime:
    if AgentRuntime.objects.filter(name=name).exists():
        raise RuntimeExistsError(f"a runtime named {name!r} already exists")
    runtime = AgentRuntime(
        name=name,
        ceiling=SideEffectLevel(ceiling),
        exempt_at_or_below=SideEffectLevel(exempt_at_or_below),
        owner=owner,
        description=description,
        escalate_after_seconds=escalate_after_seconds,
    )
    runtime.full_clean()
    runtime.save()
    audit_record(
        action=AuditAction.RUNTIME_CREATED,
        actor=actor,
        runtime=runtime,
        subject_type="runtime",
        subject=runtime.name,
        details=_settings_snapshot(runtime),
    )
    return runtime


@transaction.atomic
def runtime_update_settings(
    *,
    runtime: AgentRuntime,
    actor: Actor,
    ceiling: str,
    exempt_at_or_below: str,
    owner: User | None,
    description: str,
    escalate_after_seconds: int | EllipsisType | None = ...,
) -> bool:
    """Change a runtime's settings; returns False (and records nothing) if none changed.

    `escalate_after_seconds` (P2): how long a request waits unanswered before it is sent to
    the operators and the owner, None for never; left out (`...`), it stays as it is.
    Whether its tokens are accepted is not a setting: see runtime_disable / runtime_enable.
    """
    runtime = AgentRuntime.objects.select_for_update().get(pk=runtime.pk)
    if runtime.is_retired:
        raise RuntimeRetiredError()
    before = _settings_snapshot(runtime)
    runtime.ceiling = SideEffectLevel(ceiling)
    runtime.exempt_at_or_below = SideEffectLevel(exempt_at_or_below)
    runtime.owner = owner
    runtime.description = description
    if escalate_after_seconds is not ...:
        runtime.escalate_after_seconds = escalate_after_seconds
    after = _settings_snapshot(runtime)
    if before == after:
        return False
    runtime.full_clean()
    runtime.save()
    changed = sorted(key for key in after if before[key] != after[key])
    audit_record(
        action=AuditAction.RUNTIME_SETTINGS_CHANGED,
        actor=actor,
        runtime=runtime,
        subject_type="runtime",
        subject=runtime.name,
        details={
            "changed": changed,
            "before": {key: before[key] for key in changed},
            "after": {key: after[key] for key in changed},
        },
    )
    return True


def _active_tokens(runtime: AgentRuntime) -> int:
    return RuntimeToken.objects.filter(runtime=runtime, revoked_at__isnull=True).count()


@transaction.atomic
def runtime_disable(*, runtime: AgentRuntime, actor: Actor) -> bool:
    """Refuse every token of the runtime from its next call on, until it is enabled again.

    Nothing else changes: its tokens, settings, sessions and grants stay as they are.
    Returns False (and records nothing) if it was already disabled.
    """
    # Conditional updates: two operators at once record one change, and a retired runtime
    # (always inactive) is never touched.
    updated = AgentRuntime.objects.filter(pk=runtime.pk, is_active=True, retired_at__isnull=True).update(
        is_active=False, updated_at=timezone.now()
    )
    runtime.refresh_from_db()
    if updated != 1:
        if runtime.is_retired:
            raise RuntimeRetiredError()
        return False
    audit_record(
        action=AuditAction.RUNTIME_DISABLED,
        actor=actor,
        level=AuditLevel.WARNING,
        runtime=runtime,
        subject_type="runtime",
        subject=runtime.name,
        details={"active_tokens": _active_tokens(runtime)},
    )
    return True


@transaction.atomic
def runtime_enable(*, runtime: AgentRuntime, actor: Actor) -> bool:
    """Accept the runtime's unrevoked tokens again. A retired runtime is never enabled.

    Returns False (and records nothing) if it was already enabled.
    """
    updated = AgentRuntime.objects.filter(pk=runtime.pk, is_active=False, retired_at__isnull=True).update(
        is_active=True, updated_at=timezone.now()
    )
    runtime.refresh_from_db()
    if updated != 1:
        if runtime.is_retired:
            raise RuntimeRetiredError()
        return False
    audit_record(
        action=AuditAction.RUNTIME_ENABLED,
        actor=actor,
        runtime=runtime,
        subject_type="runtime",
        subject=runtime.name,
        details={"active_tokens": _active_tokens(runtime)},
    )
    return True


@transaction.atomic
def runtime_retire(*, runtime: AgentRuntime, actor: Actor) -> list[RuntimeToken]:
    """Retire a runtime for good: disabled, every token revoked, its settings frozen.

    The row stays (its sessions, grants, requests and audit events name it), and so does its
    name: a new runtime needs another one, so the log never mixes the two. Returns the tokens
    it revoked. A runtime already retired raises RuntimeRetiredError.
    """
    now = timezone.now()
    was_active = (
        AgentRuntime.objects.select_for_update().values_list("is_active", flat=True).get(pk=runtime.pk)
    )
    # Conditional: of two retires at once (SQLite takes no row lock) one records it.
    updated = AgentRuntime.objects.filter(pk=runtime.pk, retired_at__isnull=True).update(
        retired_at=now, retired_by=actor.user, is_active=False, updated_at=now
    )
    if updated != 1:
        raise RuntimeRetiredError()
    runtime.refresh_from_db()
    tokens = list(RuntimeToken.objects.filter(runtime=runtime, revoked_at__isnull=True).order_by("pk"))
    RuntimeToken.objects.filter(pk__in=[token.pk for token in tokens]).update(
        revoked_at=now, revoked_by=actor.user
    )
    audit_record(
        action=AuditAction.RUNTIME_RETIRED,
        actor=actor,
        level=AuditLevel.WARNING,
        runtime=runtime,
        subject_type="runtime",
        subject=runtime.name,
        details={
            "was_active": was_active,
            "tokens_revoked": [
                {"token_id": token.pk, "prefix": token.prefix, "label": token.label} for token in tokens
            ],
        },
    )
    return tokens


@transaction.atomic
def token_issue(*, runtime: AgentRuntime, actor: Actor, label: str = "") -> tuple[RuntimeToken, str]:
    """Issue a token; returns the row and the token itself, which is never stored or shown again.

    A retired runtime gets none (RuntimeRetiredError); a disabled one may, for when it is
    enabled again.
    """
    if AgentRuntime.objects.filter(pk=runtime.pk, retired_at__isnull=False).exists():
        raise RuntimeRetiredError()
    plaintext = token_generate()
    token = RuntimeToken.objects.create(
        runtime=runtime,
        label=label,
        prefix=token_prefix(plaintext),
        token_hash=token_hash(plaintext),
        created_by=actor.user,
    )
    audit_record(
        action=AuditAction.TOKEN_ISSUED,
        actor=actor,
        runtime=runtime,
        subject_type="token",
        subject=token.prefix,
        details={"token_id": token.pk, "label": label},
    )
    return token, plaintext


@transaction.atomic
def token_revoke(*, token: RuntimeToken, actor: Actor) -> RuntimeToken:
    """Revoke a token at once: the next request that presents it is refused."""
    now = timezone.now()
    # A conditional update, so two revokes at once record one revocation.
    updated = RuntimeToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=now, revoked_by=actor.user
    )
    if updated != 1:
        raise TokenAlreadyRevokedError(TOKEN_ALREADY_REVOKED_MESSAGE)
    token.refresh_from_db()
    audit_record(
        action=AuditAction.TOKEN_REVOKED,
        actor=actor,
        runtime=token.runtime,
        subject_type="token",
        subject=token.prefix,
        details={"token_id": token.pk, "label": token.label},
    )
    return token
