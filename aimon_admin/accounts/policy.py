"""Pure rules of accounts: which roles an OpenID Connect provider's claims give a person.

No models, no settings: the caller passes the claims it verified and the configured mapping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aimon_admin.accounts.roles import Role

# Words the person signing in and the operators read (tests import these).
CLAIM_MISSING = "The provider sent no {claim!r} claim, so the sign-in gave no role."
CLAIM_MALFORMED = "The provider's {claim!r} claim is not a list of names, so the sign-in gave no role."
UNKNOWN_ROLE = (
    "The {claim} value {value!r} is mapped to {role!r}, which is not a role here ({known}): it gave no role."
)


@dataclass(frozen=True)
class ClaimedRoles:
    """The roles a sign-in gives, and what in the claims gave none and should have (for the
    person, the audit event and the people page). Empty `roles` with no problems: the person
    is in none of the mapped groups."""

    roles: tuple[str, ...]
    problems: tuple[str, ...] = ()


def roles_from_claims(
    claims: Mapping[str, object], *, claim: str, mapping: Mapping[str, Sequence[str]]
) -> ClaimedRoles:
    """The roles `claims[claim]` maps to, sorted.

    Fail closed: a missing or malformed claim gives no role at all (a sign-in never keeps the
    roles of the last one), and a value mapped to a name that is not a role gives nothing.
    With no mapping each value is taken as a role's own name; values that are none are other
    groups of the person's, ignored, as are values the mapping does not name.
    """
    if claim not in claims:
        return ClaimedRoles(roles=(), problems=(CLAIM_MISSING.format(claim=claim),))
    raw = claims[claim]
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list | tuple) or not all(isinstance(value, str) for value in raw):
        return ClaimedRoles(roles=(), problems=(CLAIM_MALFORMED.format(claim=claim),))
    known = set(Role.values)
    roles: set[str] = set()
    problems: list[str] = []
    for value in dict.fromkeys(raw):  # each value once, in the provider's order
        if not mapping:
            if value in known:
                roles.add(value)
            continue
        for role in mapping.get(value, ()):
            if role in known:
                roles.add(role)
            else:
                names = ", ".join(Role.values)
                problems.append(UNKNOWN_ROLE.format(claim=claim, value=value, role=role, known=names))
    return ClaimedRoles(roles=tuple(sorted(roles)), problems=tuple(problems))
