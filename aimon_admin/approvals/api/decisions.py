"""The decision endpoints, one view for both kinds: `POST /api/v1/skill-decisions` (S2, S3)
and `POST /api/v1/tool-decisions` (part U of docs/rules.md).

Lazy authentication, with DRF's documented hooks: with a Bearer token and a body that parses
and validates, the token is looked up in the decision's own read (`services.chain_read`: one
round trip in the common case). Anything else (no or a malformed header, a body that does not
parse, invalid input) is authenticated first, by the same authentication class and
permission as every view, and then answered: an unauthenticated caller never learns what was
wrong with a body. A decision writes no audit event; it notes which enforcement point called
(G1-G3).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from aimon_admin.approvals import services
from aimon_admin.approvals.api.common import ERRORS, bearer_token, refusals_answered
from aimon_admin.approvals.api.serializers import (
    MAX_SKILLS,
    SkillDecisionIn,
    SkillDecisionsOut,
    ToolDecisionIn,
    ToolDecisionOut,
    tool_decision_input,
)
from aimon_admin.approvals.services.decisions import SkillVerdict
from aimon_admin.core.api import validate_flat
from aimon_admin.runtimes import enforcement
from aimon_admin.runtimes.authentication import RuntimeCaller, token_refused


class DecisionView(APIView, metaclass=abc.ABCMeta):
    """One decision endpoint; a kind says how its input is read, decided and answered."""

    fused_read = True  # False: the token looked up first, then the decision (benchmarks/urls.py)

    @abc.abstractmethod
    def read_input(self, body: Any) -> Any:
        """The validated call (`services.SkillCall`, `services.ToolCall`); raises the 400
        naming each bad field."""

    # The decision for a runtime and a call (`services.decide_skills`, `tool_call_decide`),
    # and the read the fused path already ran (`services.decide_for_token`).
    decide: Callable[..., Any]

    @abc.abstractmethod
    def answer(self, decided: Any) -> dict[str, Any]:
        """The decision as the endpoint answers it."""

    def perform_authentication(self, request: Request) -> None:
        if request.method != "POST" or not self.fused_read:
            super().perform_authentication(request)

    def check_permissions(self, request: Request) -> None:
        # POST checks them itself, after the fused read (see `post`).
        if request.method != "POST" or not self.fused_read:
            super().check_permissions(request)

    def post(self, request: Request) -> Response:
        unparsed: Exception | None = None
        raw_token = bearer_token(request) if self.fused_read else None
        if raw_token is not None:
            try:
                body = request.data
            except Exception as exc:  # answered after authentication, as on every view
                unparsed = exc
            else:
                try:
                    call = self.read_input(body)
                except Exception:  # answered by the usual path, after authentication
                    call = None
                if call is not None:
                    with refusals_answered():
                        decided = services.decide_for_token(raw_token, call, self.decide)
                    if decided is None:
                        raise token_refused(raw_token)
                    token, outcome = decided
                    enforcement.note_request(request, token.runtime_id)  # G1-G3
                    # Authenticated, as the usual path would say (the request log names it).
                    request.user = RuntimeCaller(runtime=token.runtime, token=token)
                    return Response(self.answer(outcome))
        super().check_permissions(request)  # authenticates (once): the usual 401s
        if unparsed is not None:
            raise unparsed
        call = self.read_input(request.data)
        with refusals_answered():
            outcome = self.decide(request.user.runtime, call)
        return Response(self.answer(outcome))


class SkillDecisionsView(DecisionView):
    def read_input(self, body: Any) -> services.SkillCall:
        return services.SkillCall(**validate_flat(SkillDecisionIn, body))

    # The invoking session is only read here: a decision never creates it (S3).
    decide = staticmethod(services.decide_skills)

    def answer(self, decided: list[SkillVerdict]) -> dict[str, Any]:
        decisions = [
            {"skill": v.skill, "decision": v.decision.value, "source": v.source.value} for v in decided
        ]
        return {"decisions": decisions}

    @extend_schema(
        summary="Decide skills for a session",
        description=(
            "Evaluates the chain for each skill, narrowest first: turn → session → invoking session "
            "→ agent → rules → default ASK; `source` names the layer that answered. A fork "
            "(only `invoking_session_id`) reads its invoking session's approvals and denials; "
            "an `invoking_session_id` this runtime never used as a session is a 400 on that field. "
            f"1-{MAX_SKILLS} skills, each once. The session is created when first seen and its "
            "principal is then fixed: another principal for it is a 409."
        ),
        request=SkillDecisionIn,
        responses={200: SkillDecisionsOut, 400: ERRORS[400], 401: ERRORS[401], 409: ERRORS[409]},
    )
    def post(self, request: Request) -> Response:
        return super().post(request)


class ToolDecisionsView(DecisionView):
    def read_input(self, body: Any) -> services.ToolCall:
        return services.ToolCall(**tool_decision_input(body))

    decide = staticmethod(services.tool_call_decide)

    def answer(self, decided: services.ToolCallDecision) -> dict[str, Any]:
        """A tool decision as the endpoint answers it (docs/api.md "Tools")."""
        verdict, axes = decided.verdict, decided.axes
        body: dict[str, Any] = {
            "decision": verdict.decision.value,
            "reason": verdict.reason.value,
            "source": verdict.source.value,
            "side_effect_level": axes.level.value,
            "destructive_behavior": axes.effective_destructive.value,
            "idempotency_behavior": axes.idempotency.value,
            "registered": decided.registered,
        }
        if verdict.rule is not None:
            body["rule"] = {"id": verdict.rule.id, "pattern": verdict.rule.text}
        if decided.note:
            body["note"] = decided.note
        return body

    @extend_schema(
        summary="May this runtime run this tool now?",
        description=(
            "The tool chain, first match wins: the ceiling (DENY) → operator DENY rules → this "
            "call's approval (`approval_id`) → turn → session → invoking session → agent grants "
            "→ operator ALLOW / ASK rules → the gate → ASK. `source` names the layer that "
            "answered; `rule` the rule, when one did. Attended means `session_id` or "
            "`invoking_session_id` is given; unattended, nobody can be asked, so ASK becomes DENY "
            "unless one of this runtime's pre-approvals answers it (PRE_APPROVED). Rules and "
            "grants narrowed to a subject pattern match the value of the tool's subject argument in "
            "`arguments`. A tool that is not registered (for this runtime, or on an enabled "
            "server) counts as MUTATING + DESTRUCTIVE. `idempotency_behavior` is retry advice"
            "; a `replay` of a NON_IDEMPOTENT tool asks again. A session is created when "
            "first seen and its principal then fixed (409 for another); an "
            "`invoking_session_id` this runtime never used is a 400 on that field."
        ),
        request=ToolDecisionIn,
        responses={200: ToolDecisionOut, **{k: ERRORS[k] for k in (400, 401, 409)}},
    )
    def post(self, request: Request) -> Response:
        return super().post(request)


skill_decisions = SkillDecisionsView.as_view()
tool_decisions = ToolDecisionsView.as_view()
