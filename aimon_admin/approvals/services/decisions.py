"""The decision read side (S2, S3): the chain evaluated for skills, from one SQL builder."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from aimon_admin.approvals import policy, rules
from aimon_admin.approvals.choices import (
    DecisionSource,
    GrantDecision,
    GrantKind,
    GrantScope,
    RuleAction,
    SkillDecision,
)
from aimon_admin.approvals.models import Grant, RuleSetVersion, Session
from aimon_admin.approvals.services.errors import _unknown_invoking
from aimon_admin.approvals.services.sessions import (
    SEEN_RESOLUTION,
    session_idle_ttl,
    session_touch,
)
from aimon_admin.core import rawsql
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.selectors import TOKEN_COLUMNS, token_from_row, token_select
from aimon_admin.runtimes.tokens import token_hash, token_looks_valid

# --- The chain (S2, S3) ------------------------------------------------------------------------


@dataclass(frozen=True)
class SkillVerdict:
    skill: str
    decision: SkillDecision
    source: DecisionSource
    widest_scope: GrantScope
    approvers: int = 1  # P3: how many people must allow it, when a rule asks about it


@dataclass(frozen=True)
class _SessionSeen:
    pk: int
    session_id: str
    principal: str
    fresh: bool  # seen within SEEN_RESOLUTION: nothing to write


_GrantRow = tuple[str, int | None, str, str, str, int]
_DecisionRead = tuple[dict[str, _SessionSeen], list[_GrantRow], int]
# The token's runtime, in the fused statement, wherever the plain read has a parameter.
_TOKEN_RUNTIME = f"(SELECT c{rawsql.all_columns(RuntimeToken).index('runtime_id')} FROM tok)"  # noqa: S608 - no input in the text # nosec B608


@functools.cache
def _decision_sql(vendor: str, n_ids: int, n_skills: int, *, fused: bool) -> str:
    """The decision read: the named sessions, the grants in force for the skills, and the
    rule set's version, in one statement: rows tagged S (session), G (grant), V (version).
    Fused, the token lookup leads it (a CTE, and a row tagged T with the token's and its
    runtime's columns) and the runtime is the token's, so no token, no S or G rows.

    The grants in force for these skills: the runtime's agent-wide ones and the turn and
    session ones of the holders, found in the query itself: the named sessions not idle
    past their TTL. The one SQL builder of the chain's reads (every decision, every caller).
    Plain SQL: it runs on every decision, and the ORM's query building costs more than the
    query (benchmarks/skill_decisions.py). Only the shape is in the text (table names from
    the models), values are parameters.
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
            f"SELECT 'G', {pad}session_id, scope, turn_id, skill, decision, approvers FROM {grant_table} "  # noqa: S608 - no input in the text # nosec B608
            f"WHERE runtime_id = {runtime} AND revoked_at IS NULL AND kind = '{GrantKind.SKILL.value}' "
            f"AND skill IN ({marks}) "
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
            sessions[b] = _SessionSeen(pk=a, session_id=b, principal=c, fresh=bool(f))  # type: ignore[arg-type,index]
        elif kind == "G":
            grants.append((b, a, c, d, e, f))  # type: ignore[arg-type]
        elif kind == "V":
            version = a  # type: ignore[assignment]
        else:
            token_row = row[1:end]
    return token_row, (sessions, grants, version)


def _decision_read(
    session_ids: list[str],
    skills: Sequence[str],
    *,
    runtime_pk: int | None = None,
    token_digest: str | None = None,
) -> tuple[tuple[object, ...] | None, _DecisionRead]:
    """Run the decision read: for `runtime_pk`, or fused behind the token whose hash is
    `token_digest`. The token's columns (None: no such token, or not fused) and what was read.

    Prepared on PostgreSQL (`rawsql.fetchall_prepared`): planning this statement costs more
    than running it. The token fused into it: measured in make prod's topology (granian
    behind nginx, benchmarks/fused_decision.py, 4 alternating rounds of 5 s), the endpoint
    with the token in this statement used 1.25 ms of server CPU per decision (granian, nginx
    and the PostgreSQL backends) against 1.81 ms for the token looked up first and this read
    after it: x0.69, 31% saved, so it stays (an optimisation like this stays only if it saves
    at least 10%).
    """
    unique = sorted(set(skills))
    fused = token_digest is not None
    sql = _decision_sql(connection.vendor, len(session_ids), len(unique), fused=fused)
    params = _decision_params(session_ids, unique, timezone.now(), runtime_pk=runtime_pk)
    if fused:
        params = [token_digest, *params]
    rows = rawsql.fetchall_prepared(sql, params)
    return _decision_rows(rows, token_columns=TOKEN_COLUMNS if fused else 0)


def skills_decide(
    *,
    runtime: AgentRuntime,
    skills: Sequence[str],
    session: Session | None,
    invoking_session: Session | None,
    turn_id: str | None,
) -> list[SkillVerdict]:
    """The chain for sessions already in hand (a request being opened, a session's page):
    turn → session → invoking session → agent → rules → default ASK (S2), read by
    `_decision_read` as every decision is. Writes nothing."""
    ids = [s.session_id for s in (session, invoking_session) if s is not None]
    _, read = _decision_read(ids, skills, runtime_pk=runtime.pk)
    return _verdicts(
        runtime.pk,
        skills,
        read,
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
    """A decision by ids for a runtime already authenticated: `_decide`, the one path."""
    ids = [sid for sid in (session_id, invoking_session_id) if sid]
    _, read = _decision_read(ids, skills, runtime_pk=runtime.pk)
    return _decide(
        runtime,
        read,
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
    the decision's own read (the skill-decision endpoint's hot path): the same path, the
    token's columns added to the same statement.

    None when `raw_token` is not the active token of an active runtime, exactly as
    `runtimes.selectors.token_authenticate` decides (the caller answers 401). Otherwise
    the token (its `last_used_at` kept as every authentication keeps it) and the
    verdicts. Nothing is cached: a revoke, a grant or a rule change holds on the next call.
    """
    if not token_looks_valid(raw_token):
        return None
    ids = [sid for sid in (session_id, invoking_session_id) if sid]
    token_row, read = _decision_read(ids, skills, token_digest=token_hash(raw_token))
    if token_row is None:
        return None
    token = token_from_row(token_row)
    verdicts = _decide(
        token.runtime,
        read,
        skills=skills,
        session_id=session_id,
        invoking_session_id=invoking_session_id,
        principal=principal,
        turn_id=turn_id,
    )
    return token, verdicts


def _decide(
    runtime: AgentRuntime,
    read: _DecisionRead,
    *,
    skills: Sequence[str],
    session_id: str | None,
    invoking_session_id: str | None,
    principal: str | None,
    turn_id: str | None,
) -> list[SkillVerdict]:
    """The one decision path, from the decision read of the named sessions.

    An invoking session never seen for this runtime is refused before anything is written
    (S3: a fork inherits from a session that exists; a decision never creates it). The
    session is created at first sight (S12) without reading it again: the read found it
    absent, so it holds no grants, and the invoking session's and the agent's grants were
    read already. A session that needs more (not seen within SEEN_RESOLUTION, idle past its
    TTL, a principal to fix or refuse) is touched as `session_touch` does, and its grants
    read again, for the touch may have expired them. In the common case — the session seen
    in the last minute under the same principal, or a fork — the read is the whole decision.
    """
    sessions, _, _ = read
    if invoking_session_id and invoking_session_id not in sessions and invoking_session_id != session_id:
        raise _unknown_invoking(invoking_session_id)
    invoking = sessions.get(invoking_session_id) if invoking_session_id else None
    session_pk = None
    if session_id:
        found = sessions.get(session_id)
        if found is None:
            created = _session_first_seen(runtime, session_id, principal)
            if created is None:  # another call created it meanwhile: as a session seen before
                return _decide_after_touch(runtime, skills, session_id, principal, invoking, turn_id)
            session_pk = created.pk
            if invoking_session_id == session_id:
                invoking = _SessionSeen(
                    pk=created.pk, session_id=session_id, principal=created.principal, fresh=True
                )
        elif not found.fresh or (principal and found.principal != principal):
            return _decide_after_touch(runtime, skills, session_id, principal, invoking, turn_id)
        else:
            session_pk = found.pk
    return _verdicts(
        runtime.pk,
        skills,
        read,
        session_pk=session_pk,
        invoking_pk=invoking.pk if invoking else None,
        turn_id=turn_id,
    )


def _session_first_seen(runtime: AgentRuntime, session_id: str, principal: str | None) -> Session | None:
    """The session, created (S12: its principal fixed now); None if another call created it
    first (the one-session-per-key constraint refused this insert)."""
    try:
        with transaction.atomic():  # a savepoint: a refused insert leaves the caller's transaction intact
            return Session.objects.create(
                runtime=runtime, session_id=session_id, principal=principal or "", last_seen_at=timezone.now()
            )
    except IntegrityError:
        return None


def _decide_after_touch(
    runtime: AgentRuntime,
    skills: Sequence[str],
    session_id: str,
    principal: str | None,
    invoking: _SessionSeen | None,
    turn_id: str | None,
) -> list[SkillVerdict]:
    """The session touched (`session_touch`: a principal fixed or refused, an idle session's
    approvals expired, `last_seen_at` kept), then the chain read again for it."""
    session = session_touch(runtime=runtime, session_id=session_id, principal=principal)
    if session is None:  # session_touch returns a session whenever an id is given
        raise RuntimeError(f"session {session_id!r} could not be read after it was touched")
    ids = [session_id] + ([invoking.session_id] if invoking and invoking.session_id != session_id else [])
    _, read = _decision_read(ids, skills, runtime_pk=runtime.pk)
    return _verdicts(
        runtime.pk,
        skills,
        read,
        session_pk=session.pk,
        invoking_pk=invoking.pk if invoking else None,
        turn_id=turn_id,
    )


def _verdicts(
    runtime_pk: int,
    skills: Sequence[str],
    read: _DecisionRead,
    *,
    session_pk: int | None,
    invoking_pk: int | None,
    turn_id: str | None,
) -> list[SkillVerdict]:
    _, grants, version = read
    held: dict[str, dict[str, tuple[str, int]]] = {skill: {} for skill in skills}
    for scope, grant_session_pk, grant_turn, skill, decision, approvers in grants:
        layer = _layer(scope, grant_session_pk, grant_turn, session_pk, invoking_pk, turn_id)
        if layer is not None:
            held[skill][layer] = (decision, approvers)
    index = rules.rule_index(version)
    verdicts = []
    for skill in skills:
        rule = index.lookup(runtime_pk, skill)
        # P3: under a rule that asks several people, an ALLOW fewer people gave answers nothing.
        floor = rule.approvers if rule is not None and rule.action == RuleAction.ASK else 1
        layers = {layer: _grant(held[skill].get(layer), floor) for layer in LAYERS}
        decision, source = policy.chain_decide(
            policy.Layers(**layers, rule=rule.action if rule else None)  # type: ignore[arg-type]
        )
        widest = rule.widest_scope if rule else GrantScope.AGENT
        verdicts.append(
            SkillVerdict(skill, decision, source, GrantScope(widest), rule.approvers if rule else 1)
        )
    return verdicts


# The grant layers of the chain, narrowest first (S2, U).
LAYERS = ("turn", "session", "invoking_session", "agent")


def _grant(held: tuple[str, int] | None, floor: int) -> GrantDecision | None:
    if held is None:
        return None
    decision, approvers = held
    if decision == GrantDecision.ALLOW and approvers < floor:
        return None
    return GrantDecision(decision)


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
