"""The decision read side (S2, S3): the chain evaluated for skills, from one SQL builder."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection
from django.utils import timezone

from aimon_admin.approvals import policy, rules
from aimon_admin.approvals.choices import (
    DecisionSource,
    GrantDecision,
    GrantScope,
    SkillDecision,
)
from aimon_admin.approvals.models import Grant, RuleSetVersion, Session
from aimon_admin.approvals.services.errors import _unknown_invoking
from aimon_admin.approvals.services.sessions import (
    SEEN_RESOLUTION,
    session_idle_ttl,
    sessions_for_decision,
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
