"""Writes for skill approvals, and the decision read side: sessions, decisions, requests,
answers, aborts, clears and revokes.

Every grant, escalation, abort-deny, clear and revoke writes its audit event in the
same transaction (A3). Exactly-once answers use conditional UPDATEs, which hold on
SQLite and PostgreSQL alike.

The modules: `sessions` (S12: first sight, the idle TTL), `decisions` (the chain's read
side, S2/S3), `requests` (opening, cancel and expiry: S4-S9), `grants` (the grant an answer
or an abort writes: S2, S4-S6, S9), `answers` (a person's answer: S4-S8, S13), which writes
each item through `item_answers` (the grant, the claim, the audit) or `two_person` (P3),
`outcomes` (what an answer comes to, below those three), `revocation` (clear and revoke:
S10), `tool_decisions` (a tool call's chain, part U) and `errors` (the refusals and
messages). The names callers outside these modules use are re-exported here, so
`services.request_answer` and `from aimon_admin.approvals.services import ...` read as they
always have; a message or a helper only tests name is imported from its own module.
"""

from __future__ import annotations

from aimon_admin.approvals.services.answers import (
    answers_for,
    request_answer,
    user_may_grant_agent,
)
from aimon_admin.approvals.services.chain_read import decide_for_token
from aimon_admin.approvals.services.decisions import SkillCall, SkillVerdict, decide_skills, skills_decide
from aimon_admin.approvals.services.errors import (
    AGENT_WIDE_ENDS,
    ESCALATION_REACH,
    REQUEST_DENY_REACH,
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
    request_shape,
    requests_expire_due,
)
from aimon_admin.approvals.services.revocation import (
    agent_grants_revoke,
    grant_revoke,
    session_clear,
    session_revoke,
)
from aimon_admin.approvals.services.sessions import (
    session_touch,
)
from aimon_admin.approvals.services.tool_decisions import (
    ToolCall,
    ToolCallDecision,
    tool_call_decide,
)
from aimon_admin.approvals.services.two_person import ALLOW_ANSWERS, request_owner

__all__ = [
    "AGENT_WIDE_ENDS",
    "ALLOW_ANSWERS",
    "ESCALATION_REACH",
    "REQUEST_DENY_REACH",
    "AnswerOutcome",
    "ApprovalError",
    "BadToolCallError",
    "NotAllowedError",
    "PrincipalConflictError",
    "RequestClosedError",
    "RequestInput",
    "SkillCall",
    "SkillVerdict",
    "ToolCall",
    "ToolCallDecision",
    "UnknownInvokingSessionError",
    "agent_grants_revoke",
    "answers_for",
    "decide_for_token",
    "decide_skills",
    "grant_revoke",
    "request_answer",
    "request_cancel",
    "request_create",
    "request_expire_if_due",
    "request_owner",
    "request_shape",
    "requests_expire_due",
    "session_clear",
    "session_revoke",
    "session_touch",
    "skills_decide",
    "tool_call_decide",
    "user_may_grant_agent",
]
