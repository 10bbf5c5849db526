"""What every fault test checks afterwards, read straight from the private database."""

from __future__ import annotations

from tests.faults.clients import Runtime
from tests.faults.conftest import Product

TOOLS = [
    {"name": "read_file", "side_effect_level": "READ_ONLY"},
    {"name": "rm_rf", "side_effect_level": "MUTATING", "destructive_behavior": "DESTRUCTIVE"},
]


def register_tools(runtime: Runtime) -> None:
    """The runtime's local tools: one read-only, one destructive (T1, T2)."""
    response = runtime.request("PUT", "/api/v1/tools", json={"tools": TOOLS})
    assert response.status_code == 200, response.text


def assert_chain_whole(product: Product) -> int:
    """A2: the whole log verifies, every row of it; return how many events it holds."""
    with product.postgres.connect() as db:
        rows = db.execute("SELECT count(*) FROM audit_auditevent").fetchone()[0]
    verified = product.run("chain")
    assert verified == {"events": rows, "problem": None}
    return rows


def assert_nothing_lost(
    product: Product, *, answered: list[str], revoked_sessions: list[str], runtime_id: int
) -> None:
    """Every answered request kept its grants and their events (A1, A3); every revoke of a
    session revoked its grants and left its event; the chain is whole (A2)."""
    with product.postgres.connect() as db:
        for request_id in answered:
            status = db.execute(
                "SELECT status FROM approvals_approvalrequest WHERE id = %s", [request_id]
            ).fetchone()
            assert status == ("ANSWERED",), (request_id, status)
            items = db.execute(
                "SELECT i.skill, g.id, g.decision, g.scope FROM approvals_approvalitem i "
                "LEFT JOIN approvals_grant g ON g.id = i.grant_id WHERE i.request_id = %s",
                [request_id],
            ).fetchall()
            assert items, request_id
            for skill, grant_id, decision, scope in items:
                assert grant_id is not None, (request_id, skill, "no grant")
                assert (decision, scope) == ("ALLOW", "SESSION"), (request_id, skill)
                events = db.execute(
                    "SELECT count(*) FROM audit_auditevent WHERE action = 'SKILL_GRANTED' "
                    "AND subject = %s AND details->>'grant_id' = %s AND details->>'request_id' = %s",
                    [skill, str(grant_id), request_id],
                ).fetchone()[0]
                assert events == 1, (request_id, skill, events)
        for session_id in revoked_sessions:
            live = db.execute(
                "SELECT count(*) FROM approvals_grant g JOIN approvals_session s ON s.id = g.session_id "
                "WHERE s.runtime_id = %s AND s.session_id = %s AND g.revoked_at IS NULL",
                [runtime_id, session_id],
            ).fetchone()[0]
            assert live == 0, (session_id, live)
            events = db.execute(
                "SELECT count(*) FROM audit_auditevent WHERE action = 'SESSION_REVOKED' "
                "AND runtime_id = %s AND session_key = %s",
                [runtime_id, session_id],
            ).fetchone()[0]
            assert events == 1, (session_id, events)
    assert_chain_whole(product)
