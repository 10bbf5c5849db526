"""Writes for skill approvals: sessions, requests, answers, aborts, clears and revokes.

Every grant, escalation, abort-deny, clear and revoke writes its audit event in the
same transaction (A3). Exactly-once answers use conditional UPDATEs, which hold on
SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import policy, rules, wakeups
from aimon_admin.approvals.choices import (
    Answer,
    DecisionSource,
    GrantDecision,
    GrantOrigin,
    GrantScope,
    ItemScope,
    RequestStatus,
    RevokeReason,
    SkillDecision,
)
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant, RuleSetVersion, Session
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.services import audit_record
from aimon_admin.core import rawsql
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.selectors import TOKEN_COLUMNS, token_from_row, token_select
from aimon_admin.runtimes.tokens import token_hash, token_looks_valid

logger = logging.getLogger(__name__)

SEEN_RESOLUTION = dt.timedelta(seconds=60)

PRINCIPAL_CONFLICT_MESSAGE = (
    "Session {session!r} belongs to principal {fixed!r}; its principal is fixed when first seen."
)
REQUEST_CLOSED_MESSAGE = "This request is already {status}."
NOT_YOURS_MESSAGE = "This request is not yours to answer."
ANSWER_NOT_OFFERED_MESSAGE = (
    "{answer} is not offered for {skill}: use one of the buttons the request shows you."
)
# S13: an answer that would hold beyond this one request, refused to someone who may not give it.
STANDING_ANSWER_REFUSED_MESSAGE = (
    "{answer} is not yours to give for {skill}: this request has no session, so it would hold "
    "for every session of {runtime}, and only an operator or the runtime's owner may answer "
    "that way. Use Deny this request instead: the runtime is told DENY for this request and "
    "nothing is stored."
)
CAPPED_ANSWER_MESSAGE = (
    "{answer} is not offered for {skill}: a rule allows answers no wider than {widest}. "
    "Use one of the buttons shown (Deny this request refuses it for this request only)."
)
# What ends an agent-wide grant (S5, S6): it can be revoked on its own (the session and
# agent pages' Revoke), or with every other one by Revoke agent-wide.
AGENT_WIDE_ENDS = "until it is revoked, on its own or with Revoke agent-wide"
ESCALATION_REACH = (
    f"applies to all sessions of the runtime, has no expiry, survives clear, and holds {AGENT_WIDE_ENDS}"
)
REQUEST_DENY_REACH = "the runtime is told DENY for this request only; nothing is stored in any grant store"
# Item 10 / S2: a second answer for a key a grant already holds (another request's answer).
SETTLED_SAME_MESSAGE = (
    "{skill}: {who} gave the same answer a moment ago on another request ({how}); this request "
    "is answered by it."
)
SETTLED_DENY_STANDS_MESSAGE = (
    "{skill}: {who} denied it a moment ago on another request, and a Deny made now beats an "
    "approval (S2), so this request is answered Deny. To allow it, revoke that denial on the "
    "session's page, then let the agent ask again."
)
DENY_REPLACED_MESSAGE = (
    "{skill}: your Deny replaced the approval {who} gave a moment ago on another request: a Deny "
    "made now beats older approvals (S2)."
)
UNKNOWN_INVOKING_SESSION_MESSAGE = (
    "No session {session!r} has been seen for this runtime, so there is nothing to inherit (S3). "
    "Name the session that launched this run as it was named in its own calls, or leave "
    "invoking_session_id out."
)


class ApprovalError(ValueError):
    """A refused approval write, with a message fit to show as it is."""


class PrincipalConflictError(ApprovalError):
    pass


class RequestClosedError(ApprovalError):
    pass


class NotAllowedError(ApprovalError):
    pass


class UnknownInvokingSessionError(ApprovalError):
    """`invoking_session_id` names no session of this runtime (API: 400 on that field)."""

    field = "invoking_session_id"


# --- Sessions (S12) ----------------------------------------------------------------------------


def session_idle_ttl() -> dt.timedelta:
    return dt.timedelta(seconds=settings.AIMON_SESSION_IDLE_TTL_SECONDS)


def session_touch(*, runtime: AgentRuntime, session_id: str | None, principal: str | None) -> Session | None:
    """The session (runtime, session_id), created at first sight; None without an id.

    The principal is fixed once a non-empty one has been named; naming another raises
    PrincipalConflictError (API: 409). A session seen again after idling past its TTL
    first loses its turn and session approvals (S12).
    """
    if not session_id:
        return None
    now = timezone.now()
    session, created = Session.objects.get_or_create(
        runtime=runtime,
        session_id=session_id,
        defaults={"principal": principal or "", "last_seen_at": now},
    )
    if created:
        return session
    if principal and session.principal and session.principal != principal:
        raise PrincipalConflictError(
            PRINCIPAL_CONFLICT_MESSAGE.format(session=session_id, fixed=session.principal)
        )
    updates: dict[str, object] = {}
    if principal and not session.principal:
        updates["principal"] = principal
    if now - session.last_seen_at > session_idle_ttl() and not _has_pending_request(session):
        _expire_session_grants(session, now)
    if now - session.last_seen_at > SEEN_RESOLUTION:
        updates["last_seen_at"] = now
    if updates:
        Session.objects.filter(pk=session.pk).update(**updates)
        for key, value in updates.items():
            setattr(session, key, value)
    return session


def _has_pending_request(session: Session) -> bool:
    """S12: a session with a pending request (its own, or a fork's that lands on it) is not idle."""
    return ApprovalRequest.objects.filter(
        Q(session=session) | Q(invoking_session=session), status=RequestStatus.PENDING
    ).exists()


def _session_active(session_pk: int | None, now: dt.datetime) -> None:
    """S12: an answer (or an abort's denial) counts as activity of the session it lands on,
    so what was just written is in force for a whole idle TTL from now."""
    if session_pk is not None:
        Session.objects.filter(pk=session_pk, last_seen_at__lt=now).update(last_seen_at=now)


def _unknown_invoking(session_id: str) -> UnknownInvokingSessionError:
    return UnknownInvokingSessionError(UNKNOWN_INVOKING_SESSION_MESSAGE.format(session=session_id))


def sessions_for_decision(
    *, runtime: AgentRuntime, session_id: str | None, invoking_session_id: str | None, principal: str | None
) -> tuple[Session | None, Session | None]:
    """The session (touched, as session_touch does) and the invoking session (only read)
    of a decision, in one query when nothing about the session needs writing.

    An invoking session never seen for this runtime is refused (UnknownInvokingSessionError),
    before anything is written: a fork inherits from a session that exists (S3).
    """
    wanted = [sid for sid in (session_id, invoking_session_id) if sid]
    found = {s.session_id: s for s in _sessions_read(runtime, wanted)} if wanted else {}
    invoking = found.get(invoking_session_id) if invoking_session_id else None
    if invoking_session_id and invoking is None and invoking_session_id != session_id:
        raise _unknown_invoking(invoking_session_id)
    session = found.get(session_id) if session_id else None
    if session_id and (session is None or _needs_touch(session, principal)):
        session = session_touch(runtime=runtime, session_id=session_id, principal=principal)
    if invoking_session_id and invoking is None:
        invoking = session  # the same id twice, seen for the first time just now
    return session, invoking


_SESSION_FIELDS = rawsql.all_columns(Session)


def _sessions_read(runtime: AgentRuntime, session_ids: list[str]) -> list[Session]:
    """The runtime's sessions with these ids (one or two), as model instances.

    Plain SQL on purpose, as `_grants_in_force`: it runs on every decision, and the ORM's
    query building costs more than the query (measured in benchmarks/skill_decisions.py).
    """
    marks = ", ".join(["%s"] * len(session_ids))
    sql = (
        f"SELECT {rawsql.select_list(Session, 's', _SESSION_FIELDS)} "  # noqa: S608 - no input in the text # nosec B608
        f"FROM {Session._meta.db_table} s WHERE s.runtime_id = %s AND s.session_id IN ({marks})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [runtime.pk, *session_ids])
        rows = cursor.fetchall()
    sessions = []
    for row in rows:
        session = rawsql.build(Session, _SESSION_FIELDS, row)
        session.runtime = runtime
        sessions.append(session)
    return sessions


def _needs_touch(session: Session, principal: str | None) -> bool:
    if principal and session.principal != principal:
        return True  # to fix an empty principal, or to refuse a different one
    return timezone.now() - session.last_seen_at > SEEN_RESOLUTION


def session_lookup(*, runtime: AgentRuntime, session_id: str | None) -> Session | None:
    if not session_id:
        return None
    return Session.objects.filter(runtime=runtime, session_id=session_id).first()


def _expire_session_grants(session: Session, now: dt.datetime) -> None:
    with transaction.atomic():
        count = (
            Grant.objects.active()
            .filter(session=session)
            .update(revoked_at=now, revoke_reason=RevokeReason.EXPIRED)
        )
        if count:
            audit_record(
                action=AuditAction.SESSION_EXPIRED,
                actor=Actor.system("session-ttl"),
                runtime=session.runtime,
                session_key=session.session_id,
                details={"removed": count, "idle_since": session.last_seen_at.isoformat()},
            )


# --- The chain (S2, S3) ------------------------------------------------------------------------


@dataclass(frozen=True)
class SkillVerdict:
    skill: str
    decision: SkillDecision
    source: DecisionSource
    widest_scope: GrantScope


def _in_force(session: Session | None, now: dt.datetime) -> bool:
    return session is not None and now - session.last_seen_at <= session_idle_ttl()


def skills_decide(
    *,
    runtime: AgentRuntime,
    skills: Sequence[str],
    session: Session | None,
    invoking_session: Session | None,
    turn_id: str | None,
) -> list[SkillVerdict]:
    """Evaluate the chain for each skill: turn → session → invoking session → agent →
    rules → default ASK (S2). One query for every store at once."""
    now = timezone.now()
    holders = [s.pk for s in (session, invoking_session) if _in_force(s, now)]
    grants, version = _grants_in_force(runtime.pk, sorted(set(skills)), holders, now)
    return _verdicts(
        runtime.pk,
        skills,
        grants,
        version,
        session_pk=session.pk if session else None,
        invoking_pk=invoking_session.pk if invoking_session else None,
        turn_id=turn_id,
    )


def decide_skills(
    *,
    runtime: AgentRuntime,
    skills: Sequence[str],
    session_id: str | None,
    invoking_session_id: str | None,
    principal: str | None,
    turn_id: str | None,
) -> list[SkillVerdict]:
    """A decision by ids, as the API asks it: `sessions_for_decision` then `skills_decide`.

    In the common case — the session was seen in the last minute under the same principal
    (or none is named) — that is one round trip: the sessions, the grants in force and the
    rule set's version in one query. Anything else about the session (unseen, idle, a
    principal to fix or refuse, last seen over a minute ago) takes the two-step path, which
    writes what must be written.
    """
    if session_id:
        ids = [sid for sid in (session_id, invoking_session_id) if sid]
        sql = _decision_sql(connection.vendor, len(ids), len(set(skills)), fused=False)
        params = _decision_params(ids, sorted(set(skills)), timezone.now(), runtime_pk=runtime.pk)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            _, read = _decision_rows(cursor.fetchall(), token_columns=0)
        verdicts = _verdicts_from_read(
            runtime.pk,
            read,
            skills=skills,
            session_id=session_id,
            invoking_session_id=invoking_session_id,
            principal=principal,
            turn_id=turn_id,
        )
        if verdicts is not None:
            return verdicts
    return _decide_two_step(
        runtime=runtime,
        skills=skills,
        session_id=session_id,
        invoking_session_id=invoking_session_id,
        principal=principal,
        turn_id=turn_id,
    )


def decide_skills_for_token(
    *,
    raw_token: str,
    skills: Sequence[str],
    session_id: str | None,
    invoking_session_id: str | None,
    principal: str | None,
    turn_id: str | None,
) -> tuple[RuntimeToken, list[SkillVerdict]] | None:
    """`decide_skills` for the runtime `raw_token` authenticates, with the token lookup in
    the decision's own round trip: the token, the sessions, the grants in force and the
    rule set's version in one statement (the skill-decision endpoint's hot path).

    None when `raw_token` is not the active token of an active runtime, exactly as
    `runtimes.selectors.token_authenticate` decides (the caller answers 401). Otherwise
    the token (its `last_used_at` kept as every authentication keeps it) and the
    verdicts; a session that needs a write (unseen, idle, a principal to fix or refuse,
    last seen over a minute ago) takes the two-step path, as `decide_skills` does.
    Nothing is cached: a revoke, a grant or a rule change holds on the next call.
    """
    if not token_looks_valid(raw_token):
        return None
    ids = [sid for sid in (session_id, invoking_session_id) if sid]
    unique = sorted(set(skills))
    sql = _decision_sql(connection.vendor, len(ids), len(unique), fused=True)
    params = [token_hash(raw_token), *_decision_params(ids, unique, timezone.now(), runtime_pk=None)]
    # Prepared on PostgreSQL: planning this statement cost more than running it.
    token_row, read = _decision_rows(rawsql.fetchall_prepared(sql, params), token_columns=TOKEN_COLUMNS)
    if token_row is None:
        return None
    token = token_from_row(token_row)
    verdicts = _verdicts_from_read(
        token.runtime.pk,
        read,
        skills=skills,
        session_id=session_id,
        invoking_session_id=invoking_session_id,
        principal=principal,
        turn_id=turn_id,
    )
    if verdicts is None:
        verdicts = _decide_two_step(
            runtime=token.runtime,
            skills=skills,
            session_id=session_id,
            invoking_session_id=invoking_session_id,
            principal=principal,
            turn_id=turn_id,
        )
    return token, verdicts


def _decide_two_step(
    *,
    runtime: AgentRuntime,
    skills: Sequence[str],
    session_id: str | None,
    invoking_session_id: str | None,
    principal: str | None,
    turn_id: str | None,
) -> list[SkillVerdict]:
    session, invoking = sessions_for_decision(
        runtime=runtime, session_id=session_id, invoking_session_id=invoking_session_id, principal=principal
    )
    return skills_decide(
        runtime=runtime, skills=skills, session=session, invoking_session=invoking, turn_id=turn_id
    )


@dataclass(frozen=True)
class _SessionSeen:
    pk: int
    principal: str
    fresh: bool  # seen within SEEN_RESOLUTION: nothing to write


_GrantRow = tuple[str, int | None, str, str, str]
_DecisionRead = tuple[dict[str, _SessionSeen], list[_GrantRow], int]
# The token's runtime, in the fused statement, wherever the plain read has a parameter.
_TOKEN_RUNTIME = f"(SELECT c{rawsql.all_columns(RuntimeToken).index('runtime_id')} FROM tok)"  # noqa: S608 - no input in the text # nosec B608


@functools.cache
def _decision_sql(vendor: str, n_ids: int, n_skills: int, *, fused: bool) -> str:
    """The decision read: the named sessions, the grants in force for the skills, and the
    rule set's version, in one statement: rows tagged S (session), G (grant), V (version).
    Fused, the token lookup leads it (a CTE, and a row tagged T with the token's and its
    runtime's columns) and the runtime is the token's, so no token, no S or G rows.

    The grants are those `_grants_in_force` reads, with the holders found in the query
    itself: the named sessions not idle past their TTL. Plain SQL, as the chain's reads;
    only the shape is in the text (table names from the models), values are parameters.
    Every row has the same columns: the token's (fused only, NULL but on T) and six more.
    """
    session_table = Session._meta.db_table
    grant_table = Grant._meta.db_table
    version_table = RuleSetVersion._meta.db_table
    ids = ", ".join(["%s"] * n_ids)
    marks = ", ".join(["%s"] * n_skills)
    runtime = _TOKEN_RUNTIME if fused else "%s"
    pad = "NULL, " * TOKEN_COLUMNS if fused else ""
    parts = []
    prefix = ""
    if fused:
        columns, source = token_select()
        names = ", ".join(f"c{n}" for n in range(TOKEN_COLUMNS))
        prefix = f"WITH tok({names}) AS (SELECT {columns} {source}) "
        parts.append(f"SELECT 'T', {names}, NULL, NULL, NULL, NULL, NULL, NULL FROM tok")  # noqa: S608 - no input in the text # nosec B608
    if n_ids:
        parts.append(
            f"SELECT 'S', {pad}id, session_id, principal, '', '', "  # noqa: S608 - no input in the text # nosec B608
            f"CASE WHEN last_seen_at >= %s THEN 1 ELSE 0 END FROM {session_table} "
            f"WHERE runtime_id = {runtime} AND session_id IN ({ids})"
        )
    if n_skills:
        holders = (
            f" OR session_id IN (SELECT id FROM {session_table} WHERE runtime_id = {runtime} "  # noqa: S608 - no input in the text # nosec B608
            f"AND session_id IN ({ids}) AND last_seen_at >= %s)"
            if n_ids
            else ""
        )
        parts.append(
            f"SELECT 'G', {pad}session_id, scope, turn_id, skill, decision, 0 FROM {grant_table} "  # noqa: S608 - no input in the text # nosec B608
            f"WHERE runtime_id = {runtime} AND revoked_at IS NULL AND skill IN ({marks}) "
            "AND (expires_at IS NULL OR expires_at > %s) "
            f"AND (scope = '{GrantScope.AGENT.value}'{holders})"
        )
    parts.append(f"SELECT 'V', {pad}version, '', '', '', '', 0 FROM {version_table} WHERE id = 1")  # noqa: S608 - no input in the text # nosec B608
    return prefix + " UNION ALL ".join(parts)


def _decision_params(
    session_ids: list[str], skills: list[str], now: dt.datetime, *, runtime_pk: int | None
) -> list[object]:
    """`_decision_sql`'s parameters, after the token's hash when fused (runtime_pk None)."""
    adapt = connection.ops.adapt_datetimefield_value
    runtime = [] if runtime_pk is None else [runtime_pk]
    params: list[object] = []
    if session_ids:
        params += [adapt(now - SEEN_RESOLUTION), *runtime, *session_ids]
    if skills:
        params += [*runtime, *skills, adapt(now)]
        if session_ids:
            params += [*runtime, *session_ids, adapt(now - session_idle_ttl())]
    return params


def _decision_rows(
    rows: list[tuple[object, ...]], *, token_columns: int
) -> tuple[tuple[object, ...] | None, _DecisionRead]:
    """The token's columns (None: no such token, or not fused) and what was read."""
    token_row = None
    sessions: dict[str, _SessionSeen] = {}
    grants: list[_GrantRow] = []
    version = 0
    end = 1 + token_columns
    for row in rows:
        kind = row[0]
        a, b, c, d, e, f = row[end:]
        if kind == "S":
            sessions[b] = _SessionSeen(pk=a, principal=c, fresh=bool(f))  # type: ignore[arg-type,index]
        elif kind == "G":
            grants.append((b, a, c, d, e))  # type: ignore[arg-type]
        elif kind == "V":
            version = a  # type: ignore[assignment]
        else:
            token_row = row[1:end]
    return token_row, (sessions, grants, version)


def _verdicts_from_read(
    runtime_pk: int,
    read: _DecisionRead,
    *,
    skills: Sequence[str],
    session_id: str | None,
    invoking_session_id: str | None,
    principal: str | None,
    turn_id: str | None,
) -> list[SkillVerdict] | None:
    """The verdicts from one decision read; None when the session needs a write first
    (unseen, not seen within SEEN_RESOLUTION, a principal to fix or refuse). Without a
    session (a fork, a scheduled run) nothing is written, so the read always serves."""
    sessions, grants, version = read
    if invoking_session_id and invoking_session_id not in sessions and invoking_session_id != session_id:
        raise _unknown_invoking(invoking_session_id)
    session_pk = None
    if session_id:
        found = sessions.get(session_id)
        if found is None or not found.fresh or (principal and found.principal != principal):
            return None
        session_pk = found.pk
    invoking = sessions.get(invoking_session_id) if invoking_session_id else None
    return _verdicts(
        runtime_pk,
        skills,
        grants,
        version,
        session_pk=session_pk,
        invoking_pk=invoking.pk if invoking else None,
        turn_id=turn_id,
    )


def _verdicts(
    runtime_pk: int,
    skills: Sequence[str],
    grants: list[tuple[str, int | None, str, str, str]],
    version: int,
    *,
    session_pk: int | None,
    invoking_pk: int | None,
    turn_id: str | None,
) -> list[SkillVerdict]:
    held: dict[str, dict[str, str]] = {skill: {} for skill in skills}
    for scope, grant_session_pk, grant_turn, skill, decision in grants:
        layer = _layer(scope, grant_session_pk, grant_turn, session_pk, invoking_pk, turn_id)
        if layer is not None:
            held[skill][layer] = decision
    index = rules.rule_index(version)
    verdicts = []
    for skill in skills:
        rule = index.lookup(runtime_pk, skill)
        decision, source = policy.chain_decide(
            policy.Layers(
                turn=_grant(held[skill].get("turn")),
                session=_grant(held[skill].get("session")),
                invoking_session=_grant(held[skill].get("invoking_session")),
                agent=_grant(held[skill].get("agent")),
                rule=rule.action if rule else None,
            )
        )
        widest = rule.widest_scope if rule else GrantScope.AGENT
        verdicts.append(SkillVerdict(skill, decision, source, GrantScope(widest)))
    return verdicts


def _grants_in_force(
    runtime_pk: int, skills: list[str], holders: list[int], now: dt.datetime
) -> tuple[list[tuple[str, int | None, str, str, str]], int]:
    """(scope, session pk, turn, skill, decision) of every grant in force for these
    skills: the runtime's agent-wide ones and the holders' turn and session ones; and the
    rule set's version, read in the same round trip (one row with an empty scope).

    Plain SQL on purpose: this runs on every decision, and building the equivalent ORM
    query costs several times more than running it (measured in benchmarks/).
    """
    table = Grant._meta.db_table
    skill_marks = ", ".join(["%s"] * len(skills))
    holder_clause = ""
    params: list[object] = [runtime_pk, *skills, connection.ops.adapt_datetimefield_value(now)]
    if holders:
        holder_clause = f" OR session_id IN ({', '.join(['%s'] * len(holders))})"
        params.extend(holders)
    grants_sql = (
        f"SELECT scope, session_id, turn_id, skill, decision, 0 FROM {table} "  # noqa: S608 - no input in the text # nosec B608
        f"WHERE runtime_id = %s AND revoked_at IS NULL AND skill IN ({skill_marks}) "
        "AND (expires_at IS NULL OR expires_at > %s) "
        f"AND (scope = '{GrantScope.AGENT.value}'{holder_clause})"
    )
    # No version row (no rule ever written) reads as version 0, as rules.rule_index does.
    version_sql = f"SELECT '', NULL, '', '', '', version FROM {RuleSetVersion._meta.db_table} WHERE id = 1"  # noqa: S608 - table names from the models, values are parameters # nosec B608
    if not skills:  # "IN ()" is a syntax error on PostgreSQL
        sql, params = version_sql, []
    else:
        sql = f"{grants_sql} UNION ALL {version_sql}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    grants = [row[:5] for row in rows if row[0]]
    version = next((row[5] for row in rows if not row[0]), 0)
    return grants, version


def _grant(value: str | None) -> GrantDecision | None:
    return GrantDecision(value) if value else None


def _layer(
    scope: str,
    grant_session_pk: int | None,
    grant_turn: str,
    session_pk: int | None,
    invoking_pk: int | None,
    turn_id: str | None,
) -> str | None:
    if scope == GrantScope.AGENT:
        return "agent"
    if scope == GrantScope.TURN:
        # A turn grant answers only that turn, of the session it was written to (the
        # session, or for a fork the invoking session: where its session answers land).
        holder = session_pk if session_pk is not None else invoking_pk
        if turn_id and grant_turn == turn_id and holder is not None and grant_session_pk == holder:
            return "turn"
        return None
    if session_pk is not None and grant_session_pk == session_pk:
        return "session"
    if invoking_pk is not None and grant_session_pk == invoking_pk:
        return "invoking_session"
    return None


# --- Requests (S4-S9) --------------------------------------------------------------------------


@dataclass
class RequestInput:
    runtime: AgentRuntime
    skills: list[str]
    session_id: str | None = None
    invoking_session_id: str | None = None
    turn_id: str | None = None
    principal: str | None = None
    reason: str = ""
    timeout_seconds: int | None = None
    idempotency_key: str | None = None


def request_shape(request: ApprovalRequest) -> policy.RequestShape:
    return policy.RequestShape(
        has_session=request.session_id is not None,
        has_invoking_session=request.invoking_session_id is not None,
        has_turn=bool(request.turn_id),
    )


def request_create(data: RequestInput) -> tuple[ApprovalRequest, bool]:
    """Open a request (or return the one this Idempotency-Key already opened: created False).

    Skills the chain already decides are filled in at once; if all are, the request is
    ANSWERED from the start.
    """
    if data.idempotency_key:
        existing = ApprovalRequest.objects.filter(
            runtime=data.runtime, idempotency_key=data.idempotency_key
        ).first()
        if existing is not None:
            return existing, False
    try:
        with transaction.atomic():
            return _request_create(data), True
    except IntegrityError:
        if data.idempotency_key:
            existing = ApprovalRequest.objects.filter(
                runtime=data.runtime, idempotency_key=data.idempotency_key
            ).first()
            if existing is not None:
                return existing, False
        raise


def _request_create(data: RequestInput) -> ApprovalRequest:
    now = timezone.now()
    session = session_touch(runtime=data.runtime, session_id=data.session_id, principal=data.principal)
    # A fork inherits from a session the runtime has opened (S3): one never seen is refused
    # rather than created with nobody's approvals.
    if (
        data.invoking_session_id
        and session_lookup(runtime=data.runtime, session_id=data.invoking_session_id) is None
    ):
        raise _unknown_invoking(data.invoking_session_id)
    # A fork's session answers land on its invoking session, so the principal a fork names
    # is held to that session's, like any session's (S12, S13).
    invoking = session_touch(
        runtime=data.runtime,
        session_id=data.invoking_session_id,
        principal=data.principal if session is None else None,
    )
    principal = policy.effective_principal(
        data.principal,
        session.principal if session else None,
        invoking.principal if invoking else None,
    )
    timeout = data.timeout_seconds or settings.AIMON_REQUEST_DEFAULT_TIMEOUT_SECONDS
    request = ApprovalRequest.objects.create(
        runtime=data.runtime,
        session=session,
        invoking_session=invoking,
        turn_id=data.turn_id or "",
        principal=principal or "",
        reason=data.reason,
        idempotency_key=data.idempotency_key or "",
        expires_at=now + dt.timedelta(seconds=timeout),
    )
    verdicts = skills_decide(
        runtime=data.runtime,
        skills=data.skills,
        session=session,
        invoking_session=invoking,
        turn_id=data.turn_id,
    )
    items = []
    for position, verdict in enumerate(verdicts):
        decided = verdict.decision != SkillDecision.ASK
        items.append(
            ApprovalItem(
                request=request,
                position=position,
                skill=verdict.skill,
                widest_scope=verdict.widest_scope,
                decision=verdict.decision if decided else "",
                source=verdict.source if decided else "",
                answered_at=now if decided else None,
            )
        )
    ApprovalItem.objects.bulk_create(items)
    if all(item.decision for item in items):
        request.status = RequestStatus.ANSWERED
        request.answered_at = now
        request.closed_at = now
        request.save(update_fields=["status", "answered_at", "closed_at"])
    return request


def _holder_session(request: ApprovalRequest, holder: str) -> Session | None:
    if holder == policy.Holder.SESSION:
        return request.session
    if holder == policy.Holder.INVOKING_SESSION:
        return request.invoking_session
    return None


@dataclass(frozen=True)
class GrantWrite:
    """What writing one answer's grant came to: the grant that now holds the key, the grants
    it superseded, and — when another request's answer already held the key — that grant
    (`settled_by`: this answer wrote nothing) or the ALLOW this DENY replaced (`replaced`)."""

    grant: Grant
    superseded: list[int]
    settled_by: Grant | None = None
    replaced: Grant | None = None


def _same_key(request: ApprovalRequest, skill: str, target: policy.GrantTarget, session: Session | None) -> Q:
    key = Q(runtime=request.runtime, skill=skill, scope=target.scope, revoked_at__isnull=True)
    if target.scope == GrantScope.AGENT:
        key &= Q(session__isnull=True)
    else:
        key &= Q(session=session)
    if target.scope == GrantScope.TURN:
        key &= Q(turn_id=request.turn_id)
    return key


def _write_grant(
    *,
    request: ApprovalRequest,
    skill: str,
    target: policy.GrantTarget,
    origin: GrantOrigin,
    user: User | None,
    now: dt.datetime,
    settle: bool = True,
) -> GrantWrite:
    """Write one grant where the target says.

    A grant of the same key that is no longer in force (its expiry passed) is superseded. One
    in force was written by another request's answer while this one waited (at creation the
    chain would have read it). A person's answer (`settle`) then follows S2: the same decision
    is answered by that grant, nothing new written; a DENY beats the ALLOW (superseding it);
    an ALLOW meets the DENY standing, and is answered by it. An abort's denial (S9) always
    supersedes. Two answers racing for the same key (each seeing it free, one insert refused
    by the one-active-grant constraint) are settled the same way: the loser reads the key again.
    """
    session = _holder_session(request, target.holder)
    for attempt in (1, 2):
        held = list(
            Grant.objects.filter(_same_key(request, skill, target, session)).select_related("granted_by")
        )
        in_force = [g for g in held if g.expires_at is None or g.expires_at > now]
        replaced = None
        if settle and in_force:
            current = in_force[0]
            if current.decision == target.decision or current.decision == GrantDecision.DENY:
                return GrantWrite(grant=current, superseded=[], settled_by=current)
            replaced = current  # our DENY, made now, beats their ALLOW (S2)
        superseded = [g.pk for g in held]
        if superseded:
            Grant.objects.filter(pk__in=superseded, revoked_at__isnull=True).update(
                revoked_at=now, revoked_by=user, revoke_reason=RevokeReason.SUPERSEDED
            )
        try:
            with transaction.atomic():  # a savepoint: a refused insert leaves the rest intact
                grant = Grant.objects.create(
                    runtime=request.runtime,
                    scope=target.scope,
                    decision=target.decision,
                    skill=skill,
                    session=session,
                    turn_id=request.turn_id if target.scope == GrantScope.TURN else "",
                    origin=origin,
                    granted_by=user,
                    request=request,
                )
        except IntegrityError:
            if attempt == 2:
                raise
            continue  # another answer committed a grant for this key meanwhile: read it
        return GrantWrite(grant=grant, superseded=superseded, replaced=replaced)
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass
class AnswerOutcome:
    written: list[ApprovalItem] = field(default_factory=list)
    already_answered: list[ApprovalItem] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    request_answered: bool = False
    # What the person must be told of an answer another request's answer decided (S2).
    notes: list[str] = field(default_factory=list)


def user_may_answer(user: User, request: ApprovalRequest) -> bool:
    if not user.is_active or not user.is_authenticated:
        return False
    is_operator = user.has_role(Role.OPERATOR)
    if not (is_operator or user.has_role(Role.APPROVER)):
        return False
    return policy.may_answer(
        username=user.username,
        is_operator=is_operator,
        is_owner=request.runtime.owner_id == user.pk,
        principal=request.principal or None,
        principal_is_user=bool(request.principal)
        and User.objects.filter(username=request.principal, is_active=True).exists(),
    )


def user_may_grant_agent(user: User, runtime: AgentRuntime) -> bool:
    return policy.may_grant_agent_scope(
        is_operator=user.has_role(Role.OPERATOR), is_owner=runtime.owner_id == user.pk
    )


def answers_for(user: User, request: ApprovalRequest, item: ApprovalItem) -> list[Answer]:
    return policy.answers_offered(
        request_shape(request),
        may_grant_agent=user_may_grant_agent(user, request.runtime),
        widest_scope=item.widest_scope,
    )


def request_answer(
    *, request: ApprovalRequest, user: User, answer: Answer | str, skills: Sequence[str] | None = None
) -> AnswerOutcome:
    """A person answers one skill or every unanswered skill of a request (S4-S8, S13).

    Each skill is written on its own (S8): a failure leaves that skill ASK and the rest
    go on. Exactly once: an item already answered is reported, never overwritten. The
    request is ANSWERED only once every skill holds a concrete grant (S7).
    """
    answer = Answer(answer)
    request = ApprovalRequest.objects.select_related("runtime", "session", "invoking_session").get(
        pk=request.pk
    )
    request_expire_if_due(request)
    if request.status != RequestStatus.PENDING:
        raise RequestClosedError(REQUEST_CLOSED_MESSAGE.format(status=request.status.lower()))
    if not user_may_answer(user, request):
        raise NotAllowedError(NOT_YOURS_MESSAGE)
    items = list(request.items.all())
    chosen = [i for i in items if skills is None or i.skill in set(skills)]
    if skills is not None and len(chosen) != len(set(skills)):
        raise ApprovalError("Unknown skill for this request.")
    outcome = AnswerOutcome()
    shape = request_shape(request)
    for item in chosen:
        if item.answered:
            outcome.already_answered.append(item)
            continue
        if answer not in answers_for(user, request, item):
            raise NotAllowedError(_refusal(user, request, item, answer))
    open_items = [item for item in chosen if not item.answered]
    for position, item in enumerate(open_items):
        last = position == len(open_items) - 1
        try:
            with transaction.atomic():
                written = _answer_item(request, item, answer, shape, user, outcome.notes)
                # The last write closes the request in its own transaction when nothing is
                # left open (S7 holds: every grant is written by then), saving a commit on
                # the path from the click to the waiting runtime.
                if last and written is not None:
                    outcome.request_answered = _close_if_complete(request)
        except Exception as exc:  # S8: one skill's failure must not stop the others
            logger.exception("writing the grant for %s of request %s failed", item.skill, request.pk)
            outcome.failed.append((item.skill, str(exc) or type(exc).__name__))
            outcome.request_answered = False
            continue
        if written is None:
            item.refresh_from_db()
            outcome.already_answered.append(item)
        else:
            outcome.written.append(written)
    if not outcome.request_answered:
        # Again after the commits: another person's answer to the request's other skills
        # may have committed alongside ours, each transaction seeing the other's item still
        # open. Whichever call checks last, after both commits, closes it.
        outcome.request_answered = _close_if_complete(request)
    if outcome.written or outcome.request_answered:
        wakeups.publish_after_commit(request.pk)
    return outcome


def _refusal(user: User, request: ApprovalRequest, item: ApprovalItem, answer: Answer) -> str:
    """Why an answer not offered is refused, and what to do instead."""
    escalates = request_shape(request).escalates
    if answer in (Answer.DENY_REQUEST, Answer.ALLOW_ONCE):
        return ANSWER_NOT_OFFERED_MESSAGE.format(answer=answer.label, skill=item.skill)
    session_answer = answer in (Answer.ALLOW_SESSION, Answer.DENY)
    reach = GrantScope.SESSION if session_answer and not escalates else GrantScope.AGENT
    if not policy.scope_within(reach, item.widest_scope):
        return CAPPED_ANSWER_MESSAGE.format(
            answer=answer.label, skill=item.skill, widest=GrantScope(item.widest_scope).label.lower()
        )
    if escalates and session_answer:
        return STANDING_ANSWER_REFUSED_MESSAGE.format(
            answer=answer.label, skill=item.skill, runtime=request.runtime.name
        )
    return ANSWER_NOT_OFFERED_MESSAGE.format(answer=answer.label, skill=item.skill)


def _answer_item(
    request: ApprovalRequest,
    item: ApprovalItem,
    answer: Answer,
    shape: policy.RequestShape,
    user: User,
    notes: list[str],
) -> ApprovalItem | None:
    now = timezone.now()
    if policy.stores_nothing(answer):
        return _deny_request_item(request, item, user, now)
    target = policy.grant_for_answer(answer, shape)
    # Claim the item first: of two people answering at once, one update finds it open.
    # Only while the request is still open: an answer that loses a race with a cancel or an
    # expiry must not write afterwards (an escalated grant, above all).
    # `decision` stays on the updated row itself (no join, which Django would turn into an
    # "id IN (subquery)" whose condition PostgreSQL does not re-check after a lock wait).
    still_open = Exists(
        ApprovalRequest.objects.filter(pk=OuterRef("request_id"), status=RequestStatus.PENDING)
    )
    claimed = ApprovalItem.objects.filter(still_open, pk=item.pk, decision="").update(
        decision=target.decision, scope=target.scope, answered_by=user, answered_at=now
    )
    if claimed != 1:
        return None
    origin = GrantOrigin.ESCALATION if target.escalated else GrantOrigin.ANSWER
    written = _write_grant(
        request=request, skill=item.skill, target=target, origin=origin, user=user, now=now
    )
    grant = written.grant
    decision = grant.decision
    if written.settled_by is not None:
        ApprovalItem.objects.filter(pk=item.pk).update(grant=grant, decision=decision)
        _audit_settled(request, item.skill, grant, answer, user)
        notes.append(_settled_note(item.skill, grant, answer))
    else:
        ApprovalItem.objects.filter(pk=item.pk).update(grant=grant)
        _audit_grant(request, item.skill, grant, target, user, written.superseded)
        if written.replaced is not None:
            notes.append(DENY_REPLACED_MESSAGE.format(skill=item.skill, who=_who(written.replaced)))
    _session_active(grant.session_id, now)
    # What the claim and the lines above wrote, without reading the row back.
    item.decision, item.scope, item.answered_by, item.answered_at = decision, target.scope, user, now
    item.grant = grant
    return item


def _who(grant: Grant) -> str:
    return grant.granted_by.username if grant.granted_by else "the system"


def _settled_note(skill: str, grant: Grant, answer: Answer) -> str:
    if grant.decision == GrantDecision.DENY and answer != Answer.DENY:
        return SETTLED_DENY_STANDS_MESSAGE.format(skill=skill, who=_who(grant))
    return SETTLED_SAME_MESSAGE.format(skill=skill, who=_who(grant), how=answer.label)


def _deny_request_item(
    request: ApprovalRequest, item: ApprovalItem, user: User, now: dt.datetime
) -> ApprovalItem | None:
    """S13's *Deny this request*: the item reads DENY (so the request, its long-poll and the
    runtime say DENY), scope REQUEST, and no grant is written anywhere."""
    still_open = Exists(
        ApprovalRequest.objects.filter(pk=OuterRef("request_id"), status=RequestStatus.PENDING)
    )
    claimed = ApprovalItem.objects.filter(still_open, pk=item.pk, decision="").update(
        decision=GrantDecision.DENY, scope=ItemScope.REQUEST, answered_by=user, answered_at=now
    )
    if claimed != 1:
        return None
    holder = request.session or request.invoking_session
    audit_record(
        action=AuditAction.SKILL_REQUEST_DENIED,
        actor=Actor.for_user(user),
        level=AuditLevel.INFO,
        runtime=request.runtime,
        session_key=holder.session_id if holder else "",
        subject_type="skill",
        subject=item.skill,
        details={
            "decision": GrantDecision.DENY,
            "scope": ItemScope.REQUEST,
            "request_id": str(request.pk),
            "answered_by": user.username,
            "stored": False,
            "reach": REQUEST_DENY_REACH,
        },
    )
    item.decision, item.scope, item.answered_by, item.answered_at = (
        GrantDecision.DENY,
        ItemScope.REQUEST,
        user,
        now,
    )
    item.grant = None
    return item


def _audit_settled(request: ApprovalRequest, skill: str, grant: Grant, answer: Answer, user: User) -> None:
    """A person's answer met a grant another request's answer wrote for the same key (S2)."""
    audit_record(
        action=AuditAction.SKILL_ANSWER_SETTLED,
        actor=Actor.for_user(user),
        level=AuditLevel.INFO,
        runtime=request.runtime,
        session_key=grant.session.session_id if grant.session else "",
        subject_type="skill",
        subject=skill,
        details={
            "answer": answer.value,
            "decision": grant.decision,
            "scope": grant.scope,
            "request_id": str(request.pk),
            "grant_id": grant.pk,
            "grant_request_id": str(grant.request_id) if grant.request_id else None,
            "answered_by": user.username,
            "stored": False,
        },
    )


def _audit_grant(
    request: ApprovalRequest,
    skill: str,
    grant: Grant,
    target: policy.GrantTarget,
    user: User,
    superseded: list[int],
) -> None:
    details: dict[str, object] = {
        "decision": grant.decision,
        "scope": grant.scope,
        "request_id": str(request.pk),
        "grant_id": grant.pk,
        "answered_by": user.username,
    }
    if superseded:
        details["superseded_grant_ids"] = superseded
    if grant.session is not None and grant.session_id != request.session_id:
        details["lands_on_invoking_session"] = grant.session.session_id
    if target.escalated:
        details["reach"] = ESCALATION_REACH
        details["all_sessions"] = True
        details["expires"] = False
        details["survives_clear"] = True
        details["removed_by"] = "Revoke (this approval on its own), or Revoke agent-wide"
    session_key = (
        grant.session.session_id
        if grant.session
        else (request.invoking_session.session_id if request.invoking_session else "")
    )
    audit_record(
        action=AuditAction.SKILL_GRANT_ESCALATED if target.escalated else AuditAction.SKILL_GRANTED,
        actor=Actor.for_user(user),
        level=AuditLevel.WARNING if target.escalated else AuditLevel.INFO,
        runtime=request.runtime,
        session_key=session_key,
        subject_type="skill",
        subject=skill,
        details=details,
    )


def _close_if_complete(request: ApprovalRequest) -> bool:
    """S7: ANSWERED only once no skill is left without a concrete decision.

    The request names whoever answered its last skill, not whoever's call closes it: the
    loser of a race on an item (or a retry after a crash) may close it, having answered
    nothing.
    """
    # One conditional UPDATE: still PENDING and no item left open, checked on the row it
    # updates (PostgreSQL re-checks both after a lock wait).
    items = ApprovalItem.objects.filter(request_id=OuterRef("pk"))
    last_answerer = (
        items.exclude(answered_by=None).order_by("-answered_at", "-position").values("answered_by")[:1]
    )
    now = timezone.now()
    return (
        ApprovalRequest.objects.filter(
            ~Exists(items.filter(decision="")), pk=request.pk, status=RequestStatus.PENDING
        ).update(
            status=RequestStatus.ANSWERED,
            answered_at=now,
            answered_by_id=Subquery(last_answerer),
            closed_at=now,
        )
        == 1
    )


def _abort(request: ApprovalRequest, status: RequestStatus, actor: Actor, why: str) -> bool:
    """S9: close a PENDING request as `status`; each unanswered skill gets a SESSION DENY
    where a session can hold it, never agent-wide. Returns False if it was not PENDING."""
    now = timezone.now()
    with transaction.atomic():
        closed = ApprovalRequest.objects.filter(pk=request.pk, status=RequestStatus.PENDING).update(
            status=status, closed_at=now
        )
        if closed != 1:
            return False
        target = policy.abort_target(request_shape(request))
        for item in request.items.filter(decision=""):
            if target is None:
                audit_record(
                    action=AuditAction.SKILL_ABORT_DENIED,
                    actor=actor,
                    runtime=request.runtime,
                    subject_type="skill",
                    subject=item.skill,
                    details={
                        "request_id": str(request.pk),
                        "why": why,
                        "written": False,
                        "note": "no session to hold a denial; the skill stays ASK (never agent-wide)",
                    },
                )
                continue
            # Claim the item before writing, as an answer does: a person's answer that
            # landed since the items were read keeps its grant instead of being superseded
            # by this DENY (or colliding with it on the one-active-grant constraint).
            claimed = ApprovalItem.objects.filter(pk=item.pk, decision="").update(
                decision=GrantDecision.DENY, scope=GrantScope.SESSION, answered_at=now
            )
            if claimed != 1:
                continue
            written = _write_grant(
                request=request,
                skill=item.skill,
                target=target,
                origin=GrantOrigin.ABORT,
                user=None,
                now=now,
                settle=False,
            )
            grant, superseded = written.grant, written.superseded
            ApprovalItem.objects.filter(pk=item.pk).update(grant=grant)
            _session_active(grant.session_id, now)
            audit_record(
                action=AuditAction.SKILL_ABORT_DENIED,
                actor=actor,
                runtime=request.runtime,
                session_key=grant.session.session_id if grant.session else "",
                subject_type="skill",
                subject=item.skill,
                details={
                    "request_id": str(request.pk),
                    "why": why,
                    "written": True,
                    "grant_id": grant.pk,
                    **({"superseded_grant_ids": superseded} if superseded else {}),
                },
            )
    wakeups.publish_after_commit(request.pk)
    return True


def request_cancel(*, request: ApprovalRequest, actor: Actor, why: str = "cancelled by the runtime") -> None:
    """The runtime cancels, or a person dismisses: S9. A closed request raises."""
    request = ApprovalRequest.objects.select_related("runtime", "session", "invoking_session").get(
        pk=request.pk
    )
    request_expire_if_due(request)
    if not _abort(request, RequestStatus.CANCELLED, actor, why):
        request.refresh_from_db()
        raise RequestClosedError(REQUEST_CLOSED_MESSAGE.format(status=request.status.lower()))


def request_expire_if_due(request: ApprovalRequest) -> bool:
    """Every read treats an expired request as aborted (S9): close it now if it is due."""
    if request.status != RequestStatus.PENDING or request.expires_at > timezone.now():
        return False
    expired = _abort(request, RequestStatus.EXPIRED, Actor.system("request-expiry"), "timed out")
    if expired:
        request.refresh_from_db()
    return expired


def requests_expire_due(*, limit: int = 500, among: QuerySet[ApprovalRequest] | None = None) -> int:
    """Expire requests past their deadline (S9): the beat task's sweep over all of them, or
    the inbox's over the requests it is about to show (`among`)."""
    requests = ApprovalRequest.objects.all() if among is None else among
    due = requests.filter(status=RequestStatus.PENDING, expires_at__lte=timezone.now()).select_related(
        "runtime", "session", "invoking_session"
    )[:limit]
    return sum(1 for request in due if request_expire_if_due(request))


# --- Clear and revoke (S10) --------------------------------------------------------------------


def _revoke(grants: Q, *, actor: Actor, reason: RevokeReason, runtime: AgentRuntime) -> int:
    return (
        Grant.objects.active()
        .filter(grants, runtime=runtime)
        .update(revoked_at=timezone.now(), revoked_by=actor.user, revoke_reason=reason)
    )


@transaction.atomic
def session_clear(*, runtime: AgentRuntime, session_id: str, actor: Actor) -> int:
    """S10: drop the session's turn and session approvals (and denials)."""
    session = session_lookup(runtime=runtime, session_id=session_id)
    removed = 0
    if session is not None:
        removed = _revoke(Q(session=session), actor=actor, reason=RevokeReason.CLEAR, runtime=runtime)
    audit_record(
        action=AuditAction.SESSION_CLEARED,
        actor=actor,
        runtime=runtime,
        session_key=session_id,
        details={"removed": removed},
    )
    return removed


@transaction.atomic
def session_revoke(*, runtime: AgentRuntime, session_id: str, agent: bool, actor: Actor) -> tuple[int, int]:
    """S10: revoke the session's approvals; with agent=True the runtime's agent-wide ones too."""
    session = session_lookup(runtime=runtime, session_id=session_id)
    removed_session = 0
    if session is not None:
        removed_session = _revoke(
            Q(session=session), actor=actor, reason=RevokeReason.REVOKE, runtime=runtime
        )
    removed_agent = 0
    if agent:
        removed_agent = _revoke(
            Q(scope=GrantScope.AGENT), actor=actor, reason=RevokeReason.REVOKE_AGENT, runtime=runtime
        )
    audit_record(
        action=AuditAction.SESSION_REVOKED,
        actor=actor,
        level=AuditLevel.WARNING if agent else AuditLevel.INFO,
        runtime=runtime,
        session_key=session_id,
        details={"removed_session": removed_session, "removed_agent": removed_agent, "agent": agent},
    )
    return removed_session, removed_agent


@transaction.atomic
def agent_grants_revoke(*, runtime: AgentRuntime, actor: Actor) -> int:
    """Revoke agent-wide: every AGENT-scope grant of the runtime (S10)."""
    removed = _revoke(
        Q(scope=GrantScope.AGENT), actor=actor, reason=RevokeReason.REVOKE_AGENT, runtime=runtime
    )
    audit_record(
        action=AuditAction.AGENT_GRANTS_REVOKED,
        actor=actor,
        level=AuditLevel.WARNING,
        runtime=runtime,
        details={"removed_agent": removed},
    )
    return removed


@transaction.atomic
def grant_revoke(*, grant: Grant, actor: Actor) -> bool:
    """Revoke one grant on its own; False if it was no longer in force."""
    revoked = (
        Grant.objects.active()
        .filter(pk=grant.pk)
        .update(revoked_at=timezone.now(), revoked_by=actor.user, revoke_reason=RevokeReason.SINGLE)
    )
    if revoked:
        audit_record(
            action=AuditAction.GRANT_REVOKED,
            actor=actor,
            runtime=grant.runtime,
            session_key=grant.session.session_id if grant.session else "",
            subject_type="skill",
            subject=grant.skill,
            details={"grant_id": grant.pk, "scope": grant.scope, "decision": grant.decision},
        )
    return bool(revoked)
