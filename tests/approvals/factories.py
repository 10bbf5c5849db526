"""Approval requests and decisions for tests, made the way the product makes them.

Two kinds of helper:

- through the services (`request_create`, `skills_decide`, `tool_call_decide`): open a skill
  request, open a tool request, ask what the chain says about skills or about a tool call;
- through the HTTP API with a runtime's `APIClient`: the same four, as a runtime sends them,
  each returning the response for the test to read.

The service helpers tell the usual story unless the call says otherwise: in session `s-1`,
and a request's principal is `alice` (the `approver` fixture). A test about the session or
the principal names it at the call (`session_id=None`, `principal=None`, ...). A decision
names no principal unless the call does: naming one fixes the session's principal (S12).

The API helpers send exactly the body they are given, nothing added: the API tests are
about what is in the body and what is not.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from rest_framework.test import APIClient

from aimon_admin.approvals.choices import RequestKind
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import (
    RequestInput,
    ToolCall,
    ToolCallDecision,
    request_create,
    skills_decide,
    tool_call_decide,
)
from aimon_admin.approvals.services.sessions import session_lookup
from aimon_admin.runtimes.models import AgentRuntime

SESSION = "s-1"
PRINCIPAL = "alice"

SKILL_DECISIONS = "/api/v1/skill-decisions"
SKILL_REQUESTS = "/api/v1/approval-requests"
TOOL_DECISIONS = "/api/v1/tool-decisions"
TOOL_REQUESTS = "/api/v1/tool-approval-requests"


# --- through the services -------------------------------------------------------------------


def open_skill_request(
    runtime: AgentRuntime,
    *skills: str,
    session_id: str | None = SESSION,
    principal: str | None = PRINCIPAL,
    invoking_session_id: str | None = None,
    turn_id: str | None = None,
    reason: str = "",
    timeout_seconds: int | None = None,
    idempotency_key: str | None = None,
) -> ApprovalRequest:
    """A new request about `skills`, opened as the API opens one (S4): the skills the chain
    already decides are filled in at once."""
    request, created = request_create(
        RequestInput(
            runtime=runtime,
            skills=list(skills),
            session_id=session_id,
            principal=principal,
            invoking_session_id=invoking_session_id,
            turn_id=turn_id,
            reason=reason,
            timeout_seconds=timeout_seconds,
            idempotency_key=idempotency_key,
        )
    )
    assert created, "an earlier request was returned, not a new one"
    return request


def open_tool_request(
    runtime: AgentRuntime,
    tool: str,
    arguments: dict[str, Any],
    *,
    server: str | None = None,
    session_id: str | None = SESSION,
    principal: str | None = PRINCIPAL,
    invoking_session_id: str | None = None,
    turn_id: str | None = None,
    reason: str = "",
    timeout_seconds: int | None = None,
) -> ApprovalRequest:
    """A new request about one call of `tool` (on MCP `server`; None: the runtime's own) with
    exactly these `arguments` (U2)."""
    request, created = request_create(
        RequestInput(
            runtime=runtime,
            skills=[],
            kind=RequestKind.TOOL,
            tool=tool,
            server=server,
            arguments=arguments,
            session_id=session_id,
            principal=principal,
            invoking_session_id=invoking_session_id,
            turn_id=turn_id,
            reason=reason,
            timeout_seconds=timeout_seconds,
        )
    )
    assert created, "an earlier request was returned, not a new one"
    return request


def skill_decisions(
    runtime: AgentRuntime,
    *skills: str,
    session_id: str | None = SESSION,
    invoking_session_id: str | None = None,
    turn_id: str | None = None,
) -> dict[str, tuple[str, str]]:
    """What the chain says about `skills` now (S2), as {skill: (decision, source)}. It reads
    only: the sessions are looked up, never touched or created (S12)."""
    verdicts = skills_decide(
        runtime=runtime,
        skills=list(skills),
        session=session_lookup(runtime=runtime, session_id=session_id),
        invoking_session=session_lookup(runtime=runtime, session_id=invoking_session_id),
        turn_id=turn_id,
    )
    return {v.skill: (str(v.decision), str(v.source)) for v in verdicts}


def decide_tool_call(
    runtime: AgentRuntime,
    tool: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    server: str | None = None,
    session_id: str | None = SESSION,
    invoking_session_id: str | None = None,
    turn_id: str | None = None,
    principal: str | None = None,
    replay: bool = False,
    approval_id: uuid.UUID | None = None,
) -> ToolCallDecision:
    """The tool chain's decision on one call (U), as the decision endpoint makes it."""
    return tool_call_decide(
        runtime,
        ToolCall(
            tool=tool,
            arguments=arguments,
            server=server,
            session_id=session_id,
            invoking_session_id=invoking_session_id,
            turn_id=turn_id,
            principal=principal,
            replay=replay,
            approval_id=approval_id,
        ),
    )


# --- through the HTTP API --------------------------------------------------------------------


def api_decide_skills(api: APIClient, skills: list[str], **body: Any) -> Any:
    """POST /skill-decisions with `skills` and exactly the rest of `body`."""
    return api.post(SKILL_DECISIONS, {"skills": skills, **body}, format="json")


def api_open_skill_request(
    api: APIClient, skills: list[str], *, idempotency_key: str | None = None, **body: Any
) -> Any:
    """POST /approval-requests with `skills` and exactly the rest of `body`, under an
    Idempotency-Key header when one is given."""
    headers = {"HTTP_IDEMPOTENCY_KEY": idempotency_key} if idempotency_key is not None else {}
    return api.post(SKILL_REQUESTS, {"skills": skills, **body}, format="json", **headers)


def api_decide_tool_call(api: APIClient, **body: Any) -> Any:
    """POST /tool-decisions with exactly `body`."""
    return api.post(TOOL_DECISIONS, body, format="json")


def api_open_tool_request(api: APIClient, **body: Any) -> Any:
    """POST /tool-approval-requests with exactly `body`."""
    return api.post(TOOL_REQUESTS, body, format="json")
