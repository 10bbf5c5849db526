"""Writes for skill approvals, and the decision read side: sessions, decisions, requests,
answers, aborts, clears, revokes and undos.

Every grant, escalation, abort-deny, clear and revoke writes its audit event in the
same transaction (A3). Exactly-once answers use conditional UPDATEs, which hold on
SQLite and PostgreSQL alike.

The modules: `sessions` (S12: first sight, the idle TTL), `decisions` (the chain's read
side, S2/S3), `requests` (opening, cancel and expiry: S4-S9), `grants` (the grant an answer
or an abort writes: S2, S4-S6, S9), `answers` (a person's answer: S4-S8, S13), which writes
each item through `item_answers` (the grant, the claim, the audit) or `two_person` (P3),
`outcomes` (what an answer comes to, below those three), `revocation` (clear and revoke:
S10; an undo, S14), `tool_decisions` (a tool call's chain, part U) and `errors` (the refusals and
messages). What callers do is re-exported here — the operations, with their inputs,
outcomes and errors — so `services.request_answer` reads as it always has; the words a page
shows and the helpers that build its cards are imported from their own modules.
"""

from __future__ import annotations

from aimon_admin.approvals.services.answers import request_answer
from aimon_admin.approvals.services.chain_read import decide_for_token
from aimon_admin.approvals.services.decisions import SkillCall, decide_skills, skills_decide
from aimon_admin.approvals.services.errors import (
    ApprovalError,
    BadToolCallError,
    NotAllowedError,
    PrincipalConflictError,
    RequestClosedError,
    UnknownInvokingSessionError,
)
from aimon_admin.approvals.services.outcomes import AnswerOutcome
from aimon_admin.approvals.services.requests import (
    RequestInput,
    request_cancel,
    request_create,
    request_expire_if_due,
    requests_expire_due,
)
from aimon_admin.approvals.services.revocation import (
    agent_grants_revoke,
    grant_revoke,
    grant_undo,
    session_clear,
    session_revoke,
)
from aimon_admin.approvals.services.tool_decisions import (
    ToolCall,
    ToolCallDecision,
    tool_call_decide,
)

__all__ = [
    "AnswerOutcome",
    "ApprovalError",
    "BadToolCallError",
    "NotAllowedError",
    "PrincipalConflictError",
    "RequestClosedError",
    "RequestInput",
    "SkillCall",
    "ToolCall",
    "ToolCallDecision",
    "UnknownInvokingSessionError",
    "agent_grants_revoke",
    "decide_for_token",
    "decide_skills",
    "grant_revoke",
    "grant_undo",
    "request_answer",
    "request_cancel",
    "request_create",
    "request_expire_if_due",
    "requests_expire_due",
    "session_clear",
    "session_revoke",
    "skills_decide",
    "tool_call_decide",
]
