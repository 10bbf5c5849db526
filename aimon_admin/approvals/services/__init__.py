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
messages). The public names are re-exported here, so `services.request_answer` and
`from aimon_admin.approvals.services import ...` read as they always have.
"""

from __future__ import annotations

from aimon_admin.approvals.services.answers import (
    answers_for,
    request_answer,
    user_may_answer,
    user_may_grant_agent,
)
from aimon_admin.approvals.services.chain_read import decide_for_token
from aimon_admin.approvals.services.decisions import SkillCall, SkillVerdict, decide_skills, skills_decide
from aimon_admin.approvals.services.errors import (
    AGENT_WIDE_ENDS,
    ALLOW_MUST_MATCH_MESSAGE,
    ALREADY_ALLOWED_MESSAGE,
    ANSWER_NOT_OFFERED_MESSAGE,
    ARGUMENTS_NUL_MESSAGE,
    CAPPED_ANSWER_MESSAGE,
    DENY_REPLACED_MESSAGE,
    ESCALATION_REACH,
    NOT_YOURS_MESSAGE,
    OWN_REQUEST_ALLOW_MESSAGE,
    PRINCIPAL_CONFLICT_MESSAGE,
    REQUEST_CLOSED_MESSAGE,
    REQUEST_DENY_REACH,
    SETTLED_DENY_STANDS_MESSAGE,
    SETTLED_SAME_MESSAGE,
    STANDING_ANSWER_REFUSED_MESSAGE,
    UNATTENDED_TOOL_REQUEST_MESSAGE,
    UNKNOWN_INVOKING_SESSION_MESSAGE,
    ApprovalError,
    BadToolCallError,
    NotAllowedError,
    PrincipalConflictError,
    RequestClosedError,
    UnknownInvokingSessionError,
)
from aimon_admin.approvals.services.grants import GrantWrite
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
    SEEN_RESOLUTION,
    session_idle_ttl,
    session_lookup,
    session_touch,
)
from aimon_admin.approvals.services.tool_decisions import (
    APPROVAL_NOT_USED_NOTE,
    REPLAY_NOT_IDEMPOTENT_NOTE,
    ToolCall,
    ToolCallDecision,
    call_approval_use,
    tool_call_decide,
    tool_call_evaluate,
)
from aimon_admin.approvals.services.two_person import ALLOW_ANSWERS, request_owner

__all__ = [
    "AGENT_WIDE_ENDS",
    "ALLOW_ANSWERS",
    "ALLOW_MUST_MATCH_MESSAGE",
    "ALREADY_ALLOWED_MESSAGE",
    "ANSWER_NOT_OFFERED_MESSAGE",
    "APPROVAL_NOT_USED_NOTE",
    "ARGUMENTS_NUL_MESSAGE",
    "CAPPED_ANSWER_MESSAGE",
    "DENY_REPLACED_MESSAGE",
    "ESCALATION_REACH",
    "NOT_YOURS_MESSAGE",
    "OWN_REQUEST_ALLOW_MESSAGE",
    "PRINCIPAL_CONFLICT_MESSAGE",
    "REPLAY_NOT_IDEMPOTENT_NOTE",
    "REQUEST_CLOSED_MESSAGE",
    "REQUEST_DENY_REACH",
    "SEEN_RESOLUTION",
    "SETTLED_DENY_STANDS_MESSAGE",
    "SETTLED_SAME_MESSAGE",
    "STANDING_ANSWER_REFUSED_MESSAGE",
    "UNATTENDED_TOOL_REQUEST_MESSAGE",
    "UNKNOWN_INVOKING_SESSION_MESSAGE",
    "AnswerOutcome",
    "ApprovalError",
    "BadToolCallError",
    "GrantWrite",
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
    "call_approval_use",
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
    "session_idle_ttl",
    "session_lookup",
    "session_revoke",
    "session_touch",
    "skills_decide",
    "tool_call_decide",
    "tool_call_evaluate",
    "user_may_answer",
    "user_may_grant_agent",
]
