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
    TOKEN_RUNTIME,
    ChainRead,
    ToolShape,
    chain_read,
    grant_layer,
    sessions_find,
)
from aimon_admin.approvals.tool_rules import tool_rule_index
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.registry import policy as registry_policy
from aimon_admin.registry import selectors as registry_selectors
from aimon_admin.registry.choices import GateReason, IdempotencyBehavior
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.selectors import token_from_row
from aimon_admin.runtimes.tokens import token_hash, token_looks_valid

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


@dataclass(frozen=True)
class _Facts:
    """What one call's decision reads: the tool's axes (None: unregistered), its subject
    argument and kind, the rule set's version and the grants in force, by layer."""

    axes: registry_policy.ToolAxes | None
    argument: registry_selectors.SubjectArgument
    version: int | None
    held: dict[str, list[tool_policy.HeldToolGrant]]


def tool_call_decide(
    *,
    runtime: AgentRuntime,
    tool: str,
    server: str | None = None,
    session_id: str | None = None,
    invoking_session_id: str | None = None,
    turn_id: str | None = None,
    principal: str | None = None,
    arguments: Mapping[str, Any] | None = None,
    replay: bool = False,
    approval_id: uuid.UUID | None = None,
) -> ToolCallDecision:
    """The tool chain for one call (U): ceiling → operator DENY rules → this call's approval
    → turn → session → invoking session → agent → ALLOW / ASK rules → the gate.

    Attended when a session or an invoking session is named (U2); an unattended question is
    DENY unless a pre-approval answers it (T8, U5). `arguments` must have passed
    `tool_policy.arguments_problem` (absent: {}). An `approval_id` is used only when the
    chain reaches it (no ceiling, no DENY rule) and it approves exactly this call (U4); a
    `replay` of a NON_IDEMPOTENT tool never uses it (U6).

    Everything is read in one statement (`chain_read`), the sessions then found as every
    decision finds them (`sessions_find`: S3, S12), and read again only if one was touched.
    """
    server = server or ""
    ids = (session_id, invoking_session_id)
    read = chain_read(ids, tool=_shape(server, tool, runtime_pk=runtime.pk), runtime_pk=runtime.pk)
    return _decide(
        runtime,
        read,
        tool=tool,
        server=server,
        session_id=session_id,
        invoking_session_id=invoking_session_id,
        turn_id=turn_id,
        principal=principal,
        arguments=arguments,
        replay=replay,
        approval_id=approval_id,
    )


def tool_call_decide_for_token(
    *,
    raw_token: str,
    tool: str,
    server: str | None = None,
    session_id: str | None = None,
    invoking_session_id: str | None = None,
    turn_id: str | None = None,
    principal: str | None = None,
    arguments: Mapping[str, Any] | None = None,
    replay: bool = False,
    approval_id: uuid.UUID | None = None,
) -> tuple[RuntimeToken, ToolCallDecision] | None:
    """`tool_call_decide` for the runtime `raw_token` authenticates, with the token looked up
    in the decision's own read (the endpoint's hot path, as the skill decision's): the same
    path, the token's columns added to the same statement. None when `raw_token` is not the
    active token of an active runtime, exactly as `runtimes.selectors.token_authenticate`
    decides (the caller answers 401); else the token (its `last_used_at` kept as every
    authentication keeps it) and the decision."""
    if not token_looks_valid(raw_token):
        return None
    server = server or ""
    ids = (session_id, invoking_session_id)
    read = chain_read(ids, tool=_shape(server, tool, runtime_pk=None), token_digest=token_hash(raw_token))
    if read.token_row is None:
        return None
    token = token_from_row(read.token_row)
    decided = _decide(
        token.runtime,
        read,
        tool=tool,
        server=server,
        session_id=session_id,
        invoking_session_id=invoking_session_id,
        turn_id=turn_id,
        principal=principal,
        arguments=arguments,
        replay=replay,
        approval_id=approval_id,
    )
    return token, decided


def _shape(server: str, tool: str, *, runtime_pk: int | None) -> ToolShape:
    """The tool a read is about; `runtime_pk` None: the fused read's runtime, the token's."""
    facts = registry_selectors.tool_facts_query(
        runtime_pk=runtime_pk,
        name=tool,
        server=server or None,
        runtime_sql=TOKEN_RUNTIME if runtime_pk is None else "",
    )
    return ToolShape(server, tool, facts)


def _facts(read: ChainRead, session_pk: int | None, invoking_pk: int | None, turn_id: str | None) -> _Facts:
    """The read's facts, its grants put in the layer each answers for this call."""
    held: dict[str, list[tool_policy.HeldToolGrant]] = {layer: [] for layer in LAYERS}
    for grant in read.grants:
        layer = grant_layer(grant, session_pk, invoking_pk, turn_id)
        if layer is not None:
            decision = GrantDecision(grant.decision)
            held[layer].append(tool_policy.HeldToolGrant(grant.pk, decision, grant.pattern, grant.approvers))
    return _Facts(
        axes=registry_selectors.tool_axes_of(read.axes_row) if read.axes_row is not None else None,
        argument=registry_selectors.subject_argument_of(read.argument_row),
        version=read.version,
        held=held,
    )


def _decide(
    runtime: AgentRuntime,
    read: ChainRead,
    *,
    tool: str,
    server: str,
    session_id: str | None,
    invoking_session_id: str | None,
    turn_id: str | None,
    principal: str | None,
    arguments: Mapping[str, Any] | None,
    replay: bool,
    approval_id: uuid.UUID | None,
) -> ToolCallDecision:
    """The decision from what `chain_read` found: the sessions as every decision finds them,
    then the chain."""
    found = sessions_find(
        runtime, read, session_id=session_id, invoking_session_id=invoking_session_id, principal=principal
    )
    if found.read_again:
        ids = (session_id, invoking_session_id)
        read = chain_read(ids, tool=_shape(server, tool, runtime_pk=runtime.pk), runtime_pk=runtime.pk)
    approval = (
        _CallApproval(
            runtime=runtime,
            approval_id=approval_id,
            session_pk=found.session_pk,
            invoking_pk=found.invoking_pk,
            replay=replay,
        )
        if approval_id is not None
        else None
    )
    return _evaluate(
        runtime=runtime,
        tool=tool,
        server=server,
        facts=_facts(read, found.session_pk, found.invoking_pk, turn_id),
        arguments=arguments,
        attended=bool(session_id or invoking_session_id),
        approval=approval,
    )


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
    server = server or ""
    ids = [s.session_id for s in (session, invoking_session) if s is not None]
    read = chain_read(ids, tool=_shape(server, tool, runtime_pk=runtime.pk), runtime_pk=runtime.pk)
    facts = _facts(
        read,
        session.pk if session else None,
        invoking_session.pk if invoking_session else None,
        turn_id,
    )
    return _evaluate(
        runtime=runtime,
        tool=tool,
        server=server,
        facts=facts,
        arguments=arguments,
        attended=session is not None or invoking_session is not None,
        approval=None,
        digest_needed=True,  # the request stores it (U4)
    )


def _evaluate(
    *,
    runtime: AgentRuntime,
    tool: str,
    server: str,
    facts: _Facts,
    arguments: Mapping[str, Any] | None,
    attended: bool,
    approval: _CallApproval | None,
    digest_needed: bool = False,
) -> ToolCallDecision:
    axes = facts.axes or registry_policy.UNREGISTERED  # T9
    gate = registry_policy.gate_decision(
        axes, ceiling=runtime.ceiling, exempt_at_or_below=runtime.exempt_at_or_below, attended=True
    )
    arguments = arguments or {}
    argument = facts.argument.argument
    kind = facts.argument.kind
    subject = subjects.subject_of(arguments, argument, kind)
    # The canonical form costs more than the rest of a decision's arithmetic: only when used.
    digest = tool_policy.arguments_digest(arguments) if approval is not None or digest_needed else ""
    notes: list[str] = [subject.note] if argument and subject.note else []
    rules = tool_rule_index(facts.version).match(
        runtime_id=runtime.pk,
        server=server,
        tool=tool,
        subject=subject,
        axes=axes,
        unattended=not attended,
    )
    call_approved = False
    if approval is not None and gate.reason != GateReason.ABOVE_CEILING and rules.deny is None:
        call_approved, note = approval.use(
            tool=tool, server=server, digest=digest, axes=axes, floor=rules.floor
        )
        if note:
            notes.append(note)
    layers = tool_policy.ToolLayers(
        gate=gate,
        rules=rules,
        call_approved=call_approved,
        **{
            layer: tool_policy.layer_decision(grants, subject, axes, floor=rules.floor)
            for layer, grants in facts.held.items()
        },
    )
    verdict = tool_policy.tool_chain_decide(layers, attended=attended)
    return ToolCallDecision(
        verdict=verdict,
        axes=axes,
        registered=facts.axes is not None,
        subject=subject,
        subject_argument=argument,
        digest=digest,
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class _CallApproval:
    """An `approval_id` presented with a call (U4, U6)."""

    runtime: AgentRuntime
    approval_id: uuid.UUID
    session_pk: int | None
    invoking_pk: int | None
    replay: bool

    def use(
        self, *, tool: str, server: str, digest: str, axes: registry_policy.ToolAxes, floor: int = 1
    ) -> tuple[bool, str]:
        """Use the approval for this call if it approves exactly this call: whether it did,
        and a note saying why not when it did not."""
        reuse = self.replay and axes.idempotency == IdempotencyBehavior.IDEMPOTENT
        if self.replay and not reuse:
            return False, REPLAY_NOT_IDEMPOTENT_NOTE  # U6
        used = call_approval_use(
            runtime=self.runtime,
            approval_id=self.approval_id,
            tool=tool,
            server=server,
            digest=digest,
            session_pk=self.session_pk,
            invoking_pk=self.invoking_pk,
            reuse=reuse,
            floor=floor,
        )
        return used, "" if used else APPROVAL_NOT_USED_NOTE


@transaction.atomic
def call_approval_use(
    *,
    runtime: AgentRuntime,
    approval_id: uuid.UUID,
    tool: str,
    server: str,
    digest: str,
    session_pk: int | None,
    invoking_pk: int | None,
    reuse: bool = False,
    floor: int = 1,
) -> bool:
    """U4: use an *Allow this call*: a TOOL request of this runtime, answered ALLOW at scope
    CALL, for this tool and server, arguments of this digest, in this session (a fork's
    request: no session, and the call names none), not used before. One conditional UPDATE
    on the request's own row: of two concurrent uses exactly one finds `call_used_at` empty.
    `reuse` (U6: a replay of an IDEMPOTENT tool) accepts an approval already used once.
    `floor` (P3): the approval counts only if at least that many people gave it. Audited
    with the digest (U7)."""
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
