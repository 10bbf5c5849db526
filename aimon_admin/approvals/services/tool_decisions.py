"""A tool call's decision (part U of docs/rules.md): the tool's axes and the gate, the call's
subject, the operator's argument rules, this call's own approval, and the tool grants at each
layer, put in order by `tool_policy.tool_chain_decide`.

Sessions are touched and created as a skill decision does (S12: a principal fixed when first
seen; an `invoking_session_id` never seen is refused, S3), through the same decision read.
An *Allow this call* is used by one conditional UPDATE on the request's own row, so two
concurrent uses of one approval give one ALLOW (U4).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from aimon_admin.approvals import subjects, tool_policy
from aimon_admin.approvals.choices import (
    GrantDecision,
    GrantKind,
    GrantScope,
    ItemScope,
    RequestKind,
    RequestStatus,
)
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant, RuleSetVersion, Session
from aimon_admin.approvals.services.decisions import (
    _TOKEN_RUNTIME,
    LAYERS,
    _layer,
    _session_first_seen,
    _SessionSeen,
)
from aimon_admin.approvals.services.errors import _unknown_invoking
from aimon_admin.approvals.services.sessions import SEEN_RESOLUTION, session_idle_ttl, session_touch
from aimon_admin.approvals.tool_rules import tool_rule_index
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core import rawsql
from aimon_admin.core.actors import Actor
from aimon_admin.registry import policy as registry_policy
from aimon_admin.registry import selectors as registry_selectors
from aimon_admin.registry.choices import GateReason, IdempotencyBehavior
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.selectors import TOKEN_COLUMNS, token_from_row, token_select
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

    Everything is read in one statement (`_read`). The sessions are then found as a skill
    decision finds them (S3, S12): a session never seen is created (it holds no grants, so
    nothing is read again); one that needs more (not seen lately, idle past its TTL, a
    principal to fix or refuse) is touched as `session_touch` does and its grants read
    again, for the touch may have expired them.
    """
    server = server or ""
    ids = [sid for sid in dict.fromkeys((session_id, invoking_session_id)) if sid]
    _, facts, seen = _read(tool, server, ids, runtime=runtime)
    return _decide(
        runtime,
        facts,
        seen,
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
    ids = [sid for sid in dict.fromkeys((session_id, invoking_session_id)) if sid]
    token_row, facts, seen = _read(tool, server, ids, token_digest=token_hash(raw_token))
    if token_row is None:
        return None
    token = token_from_row(token_row)
    decided = _decide(
        token.runtime,
        facts,
        seen,
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


def _decide(
    runtime: AgentRuntime,
    facts: _Facts,
    seen: dict[str, _SessionSeen],
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
    """The decision from what `_read` found: the sessions as a skill decision finds them,
    then the chain."""
    if invoking_session_id and invoking_session_id not in seen and invoking_session_id != session_id:
        raise _unknown_invoking(invoking_session_id)
    invoking = seen.get(invoking_session_id) if invoking_session_id else None
    invoking_pk = invoking.pk if invoking else None
    session_pk = None
    touched = False
    if session_id:
        found = seen.get(session_id)
        created = _session_first_seen(runtime, session_id, principal) if found is None else None
        if created is not None:
            session_pk = created.pk
        elif found is None or not found.fresh or (principal and found.principal != principal):
            session = session_touch(runtime=runtime, session_id=session_id, principal=principal)
            if session is None:  # session_touch returns a session whenever an id is given
                raise RuntimeError(f"session {session_id!r} could not be read after it was touched")
            session_pk, touched = session.pk, True
        else:
            session_pk = found.pk
        if invoking_session_id == session_id:
            invoking_pk = session_pk
    if touched:
        held = _held(runtime, server, tool, session_pk, invoking_pk, turn_id)
    else:
        held = _layered(facts.held[""], session_pk, invoking_pk, turn_id)  # type: ignore[arg-type]
    approval = (
        _CallApproval(
            runtime=runtime,
            approval_id=approval_id,
            session_pk=session_pk,
            invoking_pk=invoking_pk,
            replay=replay,
        )
        if approval_id is not None
        else None
    )
    return _evaluate(
        runtime=runtime,
        tool=tool,
        server=server,
        facts=_Facts(facts.axes, facts.argument, facts.version, held),
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
    without a call approval. Writes nothing."""
    server = server or ""
    facts = _Facts(
        axes=registry_selectors.tool_axes(runtime=runtime, name=tool, server=server or None),
        argument=registry_selectors.subject_argument_for(server, tool),
        version=None,
        held=_held(
            runtime,
            server,
            tool,
            session.pk if session else None,
            invoking_session.pk if invoking_session else None,
            turn_id,
        ),
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


# --- The read (one statement per decision) --------------------------------------------------------

_INT = "CAST(NULL AS BIGINT)"
_TEXT = "CAST(NULL AS TEXT)"
_GrantRow = tuple[int, int | None, int, str, str, str, str]


@functools.cache
def _read_sql(n_ids: int, axes_sql: str, subject_sql: str, *, fused: bool) -> str:
    """One statement for one call: rows tagged A (the tool's axes), U (its subject argument),
    S (the named sessions), G (the tool's grants in force: agent-wide, and those of the named
    sessions not idle past their TTL) and V (the rule set's version). Every row has the same
    columns: the tag, three numbers and four texts (typed NULLs where a row has none, so
    PostgreSQL can match the branches). Only the shape is in the text; values are parameters.
    Plain SQL, prepared on PostgreSQL, as the skill decision's read is (decisions.py): it runs
    on every tool call. Fused, the token lookup leads it (a CTE, and a row tagged T with the
    token's and its runtime's columns), the runtime is the token's, and every row carries the
    token's columns (NULL but on T) between its tag and its own seven.
    """
    session_table = Session._meta.db_table
    runtime = _TOKEN_RUNTIME if fused else "%s"
    pad = "NULL, " * TOKEN_COLUMNS if fused else ""
    grant_table = Grant._meta.db_table
    version_table = RuleSetVersion._meta.db_table
    ids = ", ".join(["%s"] * n_ids)
    parts = []
    prefix = ""
    if fused:
        columns, source = token_select()
        names = ", ".join(f"c{n}" for n in range(TOKEN_COLUMNS))
        prefix = f"WITH tok({names}) AS (SELECT {columns} {source}) "
        no_own = f"{_INT}, {_INT}, {_INT}, {_TEXT}, {_TEXT}, {_TEXT}, {_TEXT}"
        parts.append(f"SELECT 'T', {names}, {no_own} FROM tok")  # noqa: S608 - no input in the text # nosec B608
    parts += [
        f"SELECT 'A', {pad}{_INT}, {_INT}, {_INT}, a.side_effect_level, a.destructive_behavior, "  # noqa: S608 - no input in the text # nosec B608
        f"a.idempotency_behavior, {_TEXT} FROM ({axes_sql}) a",
        f"SELECT 'U', {pad}{_INT}, {_INT}, {_INT}, u.argument, u.kind, "  # noqa: S608 - no input in the text # nosec B608
        f"{_TEXT}, {_TEXT} FROM ({subject_sql}) u",
    ]
    holders = ""
    if n_ids:
        parts.append(
            f"SELECT 'S', {pad}id, CASE WHEN last_seen_at >= %s THEN 1 ELSE 0 END, {_INT}, "  # noqa: S608 - no input in the text # nosec B608
            f"session_id, principal, {_TEXT}, {_TEXT} FROM {session_table} "
            f"WHERE runtime_id = {runtime} AND session_id IN ({ids})"
        )
        holders = (
            f" OR session_id IN (SELECT id FROM {session_table} WHERE runtime_id = {runtime} "  # noqa: S608 - no input in the text # nosec B608
            f"AND session_id IN ({ids}) AND last_seen_at >= %s)"
        )
    parts.append(
        f"SELECT 'G', {pad}id, session_id, approvers, scope, turn_id, decision, pattern FROM {grant_table} "  # noqa: S608 - no input in the text # nosec B608
        f"WHERE runtime_id = {runtime} AND revoked_at IS NULL AND kind = '{GrantKind.TOOL.value}' "
        "AND server = %s AND skill = %s AND (expires_at IS NULL OR expires_at > %s) "
        f"AND (scope = '{GrantScope.AGENT.value}'{holders})"
    )
    parts.append(
        f"SELECT 'V', {pad}version, {_INT}, {_INT}, {_TEXT}, {_TEXT}, {_TEXT}, {_TEXT} "  # noqa: S608 - no input in the text # nosec B608
        f"FROM {version_table} WHERE id = 1"
    )
    return prefix + " UNION ALL ".join(parts)


def _read(
    tool: str,
    server: str,
    ids: list[str],
    *,
    runtime: AgentRuntime | None = None,
    token_digest: str | None = None,
) -> tuple[tuple[object, ...] | None, _Facts, dict[str, _SessionSeen]]:
    """Everything one call's decision reads, in one round trip: for `runtime`, or fused
    behind the token whose hash is `token_digest`. The token's columns (None: no such token,
    or not fused), the facts (its grants not yet put in layers: all under ""), and the named
    sessions as found."""
    fused = token_digest is not None
    runtime_pk = None if runtime is None else runtime.pk
    query = registry_selectors.tool_facts_query(
        runtime_pk=runtime_pk, name=tool, server=server or None, runtime_sql=_TOKEN_RUNTIME if fused else ""
    )
    now = timezone.now()
    adapt = connection.ops.adapt_datetimefield_value
    on_runtime = [] if fused else [runtime_pk]
    params: list[object] = [token_digest] if fused else []
    params += [*query.axes_params, *query.subject_params]
    if ids:
        params += [adapt(now - SEEN_RESOLUTION), *on_runtime, *ids]
    params += [*on_runtime, server, tool, adapt(now)]
    if ids:
        params += [*on_runtime, *ids, adapt(now - session_idle_ttl())]
    rows = rawsql.fetchall_prepared(
        _read_sql(len(ids), query.axes_sql, query.subject_sql, fused=fused), params
    )
    end = 1 + (TOKEN_COLUMNS if fused else 0)
    token_row = None
    axes = None
    argument = registry_selectors.SubjectArgument()
    version = 0
    seen: dict[str, _SessionSeen] = {}
    grants: list[_GrantRow] = []
    for row in rows:
        tag = row[0]
        n1, n2, n3, t1, t2, t3, t4 = row[end:]
        if tag == "A":
            axes = registry_selectors.tool_axes_of((t1, t2, t3))  # type: ignore[arg-type]
        elif tag == "U":
            argument = registry_selectors.subject_argument_of((t1, t2))  # type: ignore[arg-type]
        elif tag == "S":
            seen[t1] = _SessionSeen(pk=n1, session_id=t1, principal=t2, fresh=bool(n2))  # type: ignore[arg-type,index]
        elif tag == "G":
            grants.append((n1, n2, n3, t1, t2, t3, t4))  # type: ignore[arg-type]
        elif tag == "V":
            version = n1  # type: ignore[assignment]
        else:
            token_row = row[1:end]
    return token_row, _Facts(axes, argument, version, {"": grants}), seen  # type: ignore[dict-item]


def _layered(
    rows: list[_GrantRow], session_pk: int | None, invoking_pk: int | None, turn_id: str | None
) -> dict[str, list[tool_policy.HeldToolGrant]]:
    """The grants read, by the layer each answers for this call (none: another turn's)."""
    held: dict[str, list[tool_policy.HeldToolGrant]] = {layer: [] for layer in LAYERS}
    for pk, grant_session_pk, approvers, scope, grant_turn, decision, pattern in rows:
        layer = _layer(scope, grant_session_pk, grant_turn, session_pk, invoking_pk, turn_id)
        if layer is not None:
            held[layer].append(tool_policy.HeldToolGrant(pk, GrantDecision(decision), pattern, approvers))
    return held


def _held(
    runtime: AgentRuntime,
    server: str,
    tool: str,
    session_pk: int | None,
    invoking_pk: int | None,
    turn_id: str | None,
) -> dict[str, list[tool_policy.HeldToolGrant]]:
    """The tool's grants in force for this call, by layer, for sessions in hand: the
    runtime's agent-wide ones and the turn and session ones of these sessions while not idle
    past their TTL (S12), as `_read` finds them. Only TOOL grants of this tool and server: a
    skill named like the tool answers nothing here."""
    now = timezone.now()
    holders = [pk for pk in (session_pk, invoking_pk) if pk is not None]
    where = Q(scope=GrantScope.AGENT)
    if holders:
        where |= Q(session_id__in=holders, session__last_seen_at__gte=now - session_idle_ttl())
    rows = (
        Grant.objects.filter(
            where,
            runtime_id=runtime.pk,
            kind=GrantKind.TOOL,
            server=server,
            skill=tool,
            revoked_at__isnull=True,
        )
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .values_list("pk", "session_id", "approvers", "scope", "turn_id", "decision", "pattern")
    )
    return _layered(list(rows), session_pk, invoking_pk, turn_id)


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
        subject=tool_policy.tool_label(server=server, tool=tool),
        details={
            "request_id": str(approval_id),
            "arguments_digest": digest,
            "replay": reuse,
            "first_use": request.call_used_at == now,
        },
    )
    return True
