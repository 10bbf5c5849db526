"""A tool call's decision (part U of docs/rules.md): the tool's axes and the gate, the call's
subject, the operator's argument rules, this call's own approval, and the tool grants at each
layer, put in order by `tool_policy.tool_chain_decide`.

Sessions are touched and created as a skill decision does (S12: a principal fixed when first
seen; an `invoking_session_id` never seen is refused, S3), through the same decision read.
An *Allow this call* is used by one conditional UPDATE on the request's own row, so two
concurrent uses of one approval give one ALLOW (U4).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from aimon_admin.approvals import subjects, tool_policy, tool_rule_grammar
from aimon_admin.approvals.choices import GrantDecision, ItemScope, RequestKind, RequestStatus
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Session
from aimon_admin.approvals.services.chain_read import (
    LAYERS,
    ChainRead,
    DecisionCall,
    chain_read,
    grant_layer,
    sessions_find,
)
from aimon_admin.approvals.tool_rules import tool_rule_index
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core import metrics
from aimon_admin.core.actors import Actor
from aimon_admin.registry import policy as registry_policy
from aimon_admin.registry import selectors as registry_selectors
from aimon_admin.registry.choices import GateReason, IdempotencyBehavior
from aimon_admin.runtimes.models import AgentRuntime

APPROVAL_NOT_USED_NOTE = (
    "approval_id approves no call like this one (another runtime, session, tool or arguments, "
    "not answered Allow this call, or used already), so the chain decided without it."
)
REPLAY_NOT_IDEMPOTENT_NOTE = (
    "A replay of a tool that is not idempotent is never answered by an earlier Allow this "
    "call: it is asked again."
)


@dataclass(frozen=True)
class ToolCallDecision:
    """What the chain decided for one call, and what the runtime is told beside it."""

    verdict: tool_policy.ToolVerdict
    axes: registry_policy.ToolAxes
    registered: bool
    subject: subjects.Subject
    subject_argument: str
    # The arguments' digest where it was needed (a request opened, an approval presented), else "".
    digest: str
    notes: tuple[str, ...] = ()

    @property
    def note(self) -> str:
        return " ".join(self.notes)


@dataclass(frozen=True, kw_only=True)
class ToolCall(DecisionCall):
    """A tool call to decide (`POST /api/v1/tool-decisions`). Attended when a session or an
    invoking session is named (U2). `arguments` must have passed
    `tool_policy.arguments_problem` (absent: {}). `approval_id`: an *Allow this call*
    presented (U4); `replay`: a retry or rewake replay (U6)."""

    tool: str
    server: str | None = None
    arguments: Mapping[str, Any] | None = None
    replay: bool = False
    approval_id: uuid.UUID | None = None

    def read(self, *, runtime_pk: int | None = None, token_digest: str | None = None) -> ChainRead:
        ids = (self.session_id, self.invoking_session_id)
        tool = (self.server or "", self.tool)
        return chain_read(ids, tool=tool, runtime_pk=runtime_pk, token_digest=token_digest)


def tool_call_decide(
    runtime: AgentRuntime, call: ToolCall, read: ChainRead | None = None
) -> ToolCallDecision:
    """The tool chain for one call (U): ceiling → operator DENY rules → this call's approval
    → turn → session → invoking session → agent → ALLOW / ASK rules → the gate.

    An unattended question is DENY unless a pre-approval answers it (T8, U5). An
    `approval_id` is used only when the chain reaches it (no ceiling, no DENY rule) and it
    approves exactly this call (U4); a `replay` of a NON_IDEMPOTENT tool never uses it (U6).

    Everything is read in one statement (`chain_read`; `read`: the fused one of
    `decide_for_token`), the sessions then found as every decision finds them
    (`sessions_find`: S3, S12), and read again only if one was touched. Counted here, where
    every runtime's tool decision passes (core.metrics).
    """
    read, session_pk, invoking_pk = sessions_find(runtime, call, read)
    decided = _evaluate(runtime, call, read, session_pk, invoking_pk)
    verdict = decided.verdict
    metrics.decisions_observe(RequestKind.TOOL, read.started, ((verdict.decision, verdict.source),))
    return decided


def tool_call_evaluate(
    *,
    runtime: AgentRuntime,
    tool: str,
    server: str | None,
    session: Session | None,
    invoking_session: Session | None,
    turn_id: str | None,
    arguments: Mapping[str, Any] | None,
) -> ToolCallDecision:
    """The chain for sessions already in hand (a request being opened): as `tool_call_decide`
    without a call approval, read by `chain_read` as every decision is. Writes nothing."""
    call = ToolCall(
        tool=tool,
        server=server,
        session_id=session.session_id if session else None,
        invoking_session_id=invoking_session.session_id if invoking_session else None,
        turn_id=turn_id,
        arguments=arguments,
    )
    return _evaluate(
        runtime,
        call,
        call.read(runtime_pk=runtime.pk),
        session.pk if session else None,
        invoking_session.pk if invoking_session else None,
        digest_needed=True,  # the request stores it (U4)
    )


def _evaluate(
    runtime: AgentRuntime,
    call: ToolCall,
    read: ChainRead,
    session_pk: int | None,
    invoking_pk: int | None,
    *,
    digest_needed: bool = False,
) -> ToolCallDecision:
    """The chain from what `chain_read` found: the grants put in the layer each answers for
    this call, the call's approval used where the chain reaches it."""
    server = call.server or ""
    held: dict[str, list[tool_policy.HeldToolGrant]] = {layer: [] for layer in LAYERS}
    for grant in read.grants:
        layer = grant_layer(grant, session_pk, invoking_pk, call.turn_id)
        if layer is not None:
            decision = GrantDecision(grant.decision)
            held[layer].append(tool_policy.HeldToolGrant(grant.pk, decision, grant.pattern, grant.approvers))
    registered = read.axes_row is not None
    # T9: an unregistered tool counts as the worst case.
    axes = registry_selectors.tool_axes_of(read.axes_row) if registered else registry_policy.UNREGISTERED
    gate = registry_policy.gate_decision(
        axes, ceiling=runtime.ceiling, exempt_at_or_below=runtime.exempt_at_or_below, attended=True
    )
    arguments = call.arguments or {}
    subject_argument = registry_selectors.subject_argument_of(read.argument_row)
    argument = subject_argument.argument
    subject = subjects.subject_of(arguments, argument, subject_argument.kind)
    # The canonical form costs more than the rest of a decision's arithmetic: only when used.
    digest = tool_policy.arguments_digest(arguments) if call.approval_id is not None or digest_needed else ""
    notes: list[str] = [subject.note] if argument and subject.note else []
    attended = bool(call.session_id or call.invoking_session_id)
    rules = tool_rule_index(read.version).match(
        runtime_id=runtime.pk,
        server=server,
        tool=call.tool,
        subject=subject,
        axes=axes,
        unattended=not attended,
    )
    call_approved = False
    if call.approval_id is not None and gate.reason != GateReason.ABOVE_CEILING and rules.deny is None:
        if call.replay and axes.idempotency != IdempotencyBehavior.IDEMPOTENT:
            notes.append(REPLAY_NOT_IDEMPOTENT_NOTE)  # U6
        else:
            call_approved = call_approval_use(
                runtime, call, digest, session_pk, invoking_pk, floor=rules.floor
            )
            if not call_approved:
                notes.append(APPROVAL_NOT_USED_NOTE)
    layers = tool_policy.ToolLayers(
        gate=gate,
        rules=rules,
        call_approved=call_approved,
        **{
            layer: tool_policy.layer_decision(grants, subject, axes, floor=rules.floor)
            for layer, grants in held.items()
        },
    )
    return ToolCallDecision(
        verdict=tool_policy.tool_chain_decide(layers, attended=attended),
        axes=axes,
        registered=registered,
        subject=subject,
        subject_argument=argument,
        digest=digest,
        notes=tuple(notes),
    )


@transaction.atomic
def call_approval_use(
    runtime: AgentRuntime,
    call: ToolCall,
    digest: str,
    session_pk: int | None,
    invoking_pk: int | None,
    floor: int = 1,
) -> bool:
    """U4: use the call's *Allow this call* (`approval_id`): a TOOL request of this runtime,
    answered ALLOW at scope CALL, for this tool and server, arguments of this digest, in this
    session (a fork's request: no session, and the call names none), not used before. One
    conditional UPDATE on the request's own row: of two concurrent uses exactly one finds
    `call_used_at` empty. A `replay` (U6: the caller lets only an IDEMPOTENT tool's through)
    accepts an approval already used once. `floor` (P3): the approval counts only if at least
    that many people gave it. Audited with the digest (U7)."""
    approval_id, server, tool, reuse = call.approval_id, call.server or "", call.tool, call.replay
    if session_pk is not None:
        holder = Q(session_id=session_pk)
    elif invoking_pk is not None:
        holder = Q(session__isnull=True, invoking_session_id=invoking_pk)
    else:
        return False  # an unattended call: no session was ever asked (T8)
    now = timezone.now()
    approved_call = Exists(
        ApprovalItem.objects.filter(
            request_id=OuterRef("pk"),
            decision=GrantDecision.ALLOW,
            scope=ItemScope.CALL,
            approvers__gte=floor,
        )
    )
    same = ApprovalRequest.objects.filter(
        approved_call,
        holder,
        pk=approval_id,
        runtime_id=runtime.pk,
        kind=RequestKind.TOOL,
        status=RequestStatus.ANSWERED,
        tool=tool,
        server=server,
        arguments_digest=digest,
    )
    if reuse:
        count = same.update(call_used_at=Coalesce("call_used_at", now))
    else:
        count = same.filter(call_used_at__isnull=True).update(call_used_at=now)
    if count != 1:
        return False
    request = ApprovalRequest.objects.select_related("session", "invoking_session").get(pk=approval_id)
    held_by = request.session or request.invoking_session
    audit_record(
        action=AuditAction.TOOL_CALL_APPROVAL_USED,
        actor=Actor.for_runtime(runtime),
        runtime=runtime,
        session_key=held_by.session_id if held_by else "",
        subject_type="tool",
        subject=tool_rule_grammar.tool_label(server=server, tool=tool),
        details={
            "request_id": str(approval_id),
            "arguments_digest": digest,
            "replay": reuse,
            "first_use": request.call_used_at == now,
        },
    )
    return True
