"""Writes for agent runtimes and their tokens, each with its audit event (A1, A3)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.core.choices import SideEffectLevel
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.tokens import token_generate, token_hash, token_prefix

TOKEN_ALREADY_REVOKED_MESSAGE = "This token was already revoked."  # noqa: S105 - not a secret # nosec B105


class RuntimeExistsError(ValueError):
    pass


class TokenAlreadyRevokedError(ValueError):
    pass


def _settings_snapshot(runtime: AgentRuntime) -> dict[str, str | None]:
    return {
        "ceiling": runtime.ceiling,
        "exempt_at_or_below": runtime.exempt_at_or_below,
        "owner": runtime.owner.username if runtime.owner else None,
        "description": runtime.description,
        "is_active": "yes" if runtime.is_active else "no",
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
) -> AgentRuntime:
    if AgentRuntime.objects.filter(name=name).exists():
        raise RuntimeExistsError(f"a runtime named {name!r} already exists")
    runtime = AgentRuntime(
        name=name,
        ceiling=SideEffectLevel(ceiling),
        exempt_at_or_below=SideEffectLevel(exempt_at_or_below),
        owner=owner,
        description=description,
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
    is_active: bool = True,
) -> bool:
    """Change a runtime's settings; returns False (and records nothing) if none changed."""
    runtime = AgentRuntime.objects.select_for_update().get(pk=runtime.pk)
    before = _settings_snapshot(runtime)
    runtime.ceiling = SideEffectLevel(ceiling)
    runtime.exempt_at_or_below = SideEffectLevel(exempt_at_or_below)
    runtime.owner = owner
    runtime.description = description
    runtime.is_active = is_active
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


@transaction.atomic
def token_issue(*, runtime: AgentRuntime, actor: Actor, label: str = "") -> tuple[RuntimeToken, str]:
    """Issue a token; returns the row and the token itself, which is never stored or shown again."""
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
