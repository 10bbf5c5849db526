"""Reads for agent runtimes and tokens."""

from __future__ import annotations

import datetime as dt

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.tokens import token_hash, token_looks_valid

# last_used_at is refreshed at most this often, so a busy runtime does not turn every
# API call into a write.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)


def runtime_list() -> QuerySet[AgentRuntime]:
    return AgentRuntime.objects.select_related("owner").annotate(
        active_tokens=Count("tokens", filter=Q(tokens__revoked_at__isnull=True))
    )


def runtime_tokens(*, runtime: AgentRuntime) -> QuerySet[RuntimeToken]:
    return runtime.tokens.select_related("created_by", "revoked_by")


def token_authenticate(raw: str) -> RuntimeToken | None:
    """The active token of an active runtime that `raw` is, or None."""
    if not token_looks_valid(raw):
        return None
    token = (
        RuntimeToken.objects.select_related("runtime")
        .filter(token_hash=token_hash(raw), revoked_at__isnull=True, runtime__is_active=True)
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        RuntimeToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
