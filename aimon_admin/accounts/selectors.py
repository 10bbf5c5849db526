"""Reads for the operators' administration pages: people, and sign-ins that are locked."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, replace

from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from aimon_admin.accounts.models import OidcIdentity, User


def password_link_valid_hours() -> int:
    """How many hours a set-password link stays valid (Django's PASSWORD_RESET_TIMEOUT)."""
    return int(settings.PASSWORD_RESET_TIMEOUT // 3600)


def oidc_identity_of(user: User) -> OidcIdentity | None:
    """How the person signs in through the configured OpenID Connect provider, if they do."""
    if not settings.AIMON_OIDC_ENABLED:
        return None
    return OidcIdentity.objects.filter(user=user, issuer=settings.AIMON_OIDC_ISSUER).first()


def people() -> QuerySet[User]:
    """Everyone, active first, by username, with their roles read in the same round trips."""
    return User.objects.prefetch_related("groups").order_by("-is_active", "username")


@dataclass(frozen=True)
class LockedSignIn:
    """A username locked out from one address after too many failed sign-ins."""

    username: str
    ip_address: str
    failures: int
    last_failure: dt.datetime
    lifts_at: dt.datetime  # when it lifts by itself, if nobody tries again meanwhile
    is_person: bool  # a person by that name exists (else someone guessed a name)


def locked_sign_ins(*, now: dt.datetime | None = None) -> list[LockedSignIn]:
    """The username and address pairs django-axes refuses now, newest failure first.

    As axes counts them (AXES_LOCKOUT_PARAMETERS: username with address): the failures of
    the pair's records (one per browser) newer than the cool-off, at least the limit.
    """
    now = now or timezone.now()
    cool_off = settings.AXES_COOLOFF_TIME
    limit = settings.AXES_FAILURE_LIMIT
    pairs: dict[tuple[str, str], list[tuple[dt.datetime, int]]] = defaultdict(list)
    recent = AccessAttempt.objects.filter(attempt_time__gte=now - cool_off).values_list(
        "username", "ip_address", "attempt_time", "failures_since_start"
    )
    for username, ip_address, attempt_time, failures in recent:
        pairs[(username or "", ip_address or "")].append((attempt_time, failures))
    found = []
    for (username, ip_address), attempts in pairs.items():
        attempts.sort(reverse=True)
        if sum(failures for _, failures in attempts) < limit:
            continue
        # It lifts when the records that make up the limit, newest first, start to age out.
        counted, lifts_at = 0, attempts[-1][0] + cool_off
        for attempt_time, failures in attempts:
            counted += failures
            if counted >= limit:
                lifts_at = attempt_time + cool_off
                break
        found.append(
            LockedSignIn(
                username=username,
                ip_address=ip_address,
                failures=sum(failures for _, failures in attempts),
                last_failure=attempts[0][0],
                lifts_at=lifts_at,
                is_person=False,
            )
        )
    names = User.objects.filter(username__in=[lock.username for lock in found])
    known = set(names.values_list("username", flat=True))
    found = [replace(lock, is_person=lock.username in known) for lock in found]
    return sorted(found, key=lambda lock: lock.last_failure, reverse=True)


def locked_sign_ins_of(username: str) -> list[LockedSignIn]:
    return [lock for lock in locked_sign_ins() if lock.username == username]


LINKS_OFF_MESSAGE = (
    "Password sign-in is off on this site, so a set-password link would let nobody in: people "
    "sign in through {provider}."
)


def password_links_refusal() -> str | None:
    """Why no set-password link is made or opened now (password sign-in is off), or None."""
    if settings.AIMON_PASSWORD_SIGN_IN:
        return None
    return LINKS_OFF_MESSAGE.format(provider=settings.AIMON_OIDC_PROVIDER_NAME)
