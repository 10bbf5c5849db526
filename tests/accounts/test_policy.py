"""Which roles a provider's claims give (accounts.policy.roles_from_claims): a table of cases,
no database."""

from __future__ import annotations

import pytest

from aimon_admin.accounts.policy import (
    CLAIM_MALFORMED,
    CLAIM_MISSING,
    UNKNOWN_ROLE,
    ClaimedRoles,
    roles_from_claims,
)

MAP = {"ops": ["operator"], "sec": ["auditor"], "leads": ["approver", "auditor"], "admins": ["admin"]}
KNOWN = "operator, approver, auditor"


@pytest.mark.parametrize(
    ("claims", "mapping", "expected"),
    [
        ({"groups": ["ops"]}, MAP, ClaimedRoles(roles=("operator",))),
        ({"groups": ["sec", "ops", "ops"]}, MAP, ClaimedRoles(roles=("auditor", "operator"))),
        ({"groups": ["leads"]}, MAP, ClaimedRoles(roles=("approver", "auditor"))),
        # Groups the mapping does not name are the person's other groups: nothing, quietly.
        ({"groups": ["payroll", "ops"]}, MAP, ClaimedRoles(roles=("operator",))),
        # In no group at all: no role, and nothing wrong with the configuration.
        ({"groups": []}, MAP, ClaimedRoles(roles=())),
        # A value mapped to something that is not a role gives nothing, and says so.
        (
            {"groups": ["admins"]},
            MAP,
            ClaimedRoles(
                roles=(),
                problems=(UNKNOWN_ROLE.format(claim="groups", value="admins", role="admin", known=KNOWN),),
            ),
        ),
        (
            {"groups": ["admins", "sec"]},
            MAP,
            ClaimedRoles(
                roles=("auditor",),
                problems=(UNKNOWN_ROLE.format(claim="groups", value="admins", role="admin", known=KNOWN),),
            ),
        ),
        # A missing claim takes every role away (fail closed), and says why.
        (
            {"email": "x@example.test"},
            MAP,
            ClaimedRoles(roles=(), problems=(CLAIM_MISSING.format(claim="groups"),)),
        ),
        ({"groups": None}, MAP, ClaimedRoles(roles=(), problems=(CLAIM_MALFORMED.format(claim="groups"),))),
        (
            {"groups": ["ops", 7]},
            MAP,
            ClaimedRoles(roles=(), problems=(CLAIM_MALFORMED.format(claim="groups"),)),
        ),
        (
            {"groups": {"ops": True}},
            MAP,
            ClaimedRoles(roles=(), problems=(CLAIM_MALFORMED.format(claim="groups"),)),
        ),
        # One name as a string, as some providers send a single group.
        ({"groups": "ops"}, MAP, ClaimedRoles(roles=("operator",))),
        # No mapping: the values are role names; other values are other groups.
        ({"groups": ["auditor", "approver", "admin"]}, {}, ClaimedRoles(roles=("approver", "auditor"))),
        ({"groups": ["Operator"]}, {}, ClaimedRoles(roles=())),
    ],
)
def test_roles_from_claims(claims: dict, mapping: dict, expected: ClaimedRoles) -> None:
    assert roles_from_claims(claims, claim="groups", mapping=mapping) == expected


def test_the_claim_name_is_the_configured_one() -> None:
    claims = {"groups": ["ops"], "roles": ["sec"]}
    assert roles_from_claims(claims, claim="roles", mapping=MAP) == ClaimedRoles(roles=("auditor",))
