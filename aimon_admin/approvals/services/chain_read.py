"""The chain's one read (S2, S3, S12, part U): everything a skill or a tool decision reads, in
one statement, and the sessions it names found as every decision finds them.

One statement builder for both kinds. Rows are tagged: T the token and its runtime (fused
only), S the named sessions, G the grants in force, V the rule set's version, and for a tool
A its axes and U its subject argument. The grants in force are the runtime's agent-wide
ones and the turn and session ones of the named sessions not idle past their TTL (S12),
written here once. Plain SQL, prepared on PostgreSQL: it runs on every decision, and
building the ORM query costs more than running it (benchmarks/skill_decisions.py). Only the
shape is in the text (table names from the models); every value is a parameter.

Fused (the decision endpoints' hot path), the token lookup leads the statement as a CTE and
the runtime is the token's: no token, no S or G rows. Measured in make prod's topology
(benchmarks/fused_decision.py), the token in the decision's own read used 1.25 ms of server
CPU per decision against 1.81 ms for the token looked up first: x0.69, so it stays (a
special stays only where it saves at least 10%).
"""

from __future__ import annotations

import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from aimon_admin.approvals.choices import GrantKind, GrantScope
from aimon_admin.approvals.models import Grant, RuleSetVersion, Session
from aimon_admin.approvals.services.errors import UnknownInvokingSessionError
from aimon_admin.approvals.services.sessions import SEEN_RESOLUTION, session_idle_ttl, session_touch
from aimon_admin.core import rawsql
from aimon_admin.registry import selectors as registry_selectors
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.selectors import TOKEN_COLUMNS, token_from_row, token_select
from aimon_admin.runtimes.tokens import token_hash, token_looks_valid

# The token's runtime, in the fused statement, wherever the plain read has a parameter.
TOKEN_RUNTIME = f"(SELECT c{rawsql.all_columns(RuntimeToken).index('runtime_id')} FROM tok)"  # noqa: S608 - no input in the text # nosec B608

# Every row's own columns: three numbers and five texts, typed NULLs where a row has none
# (so PostgreSQL can match the branches of the UNION).
_INT = "CAST(NULL AS BIGINT)"
_TEXT = "CAST(NULL AS TEXT)"
_NO_COLUMNS = f"{_INT}, {_INT}, {_INT}, {_TEXT}, {_TEXT}, {_TEXT}, {_TEXT}, {_TEXT}"


@dataclass(frozen=True)
class SessionSeen:
    pk: int
    principal: str
    fresh: bool  # seen within SEEN_RESOLUTION: nothing to write


@dataclass(frozen=True)
class GrantRow:
    """A grant in force, as the read found it: `name` is the skill, or the tool."""

    pk: int
    session_pk: int | None
    approvers: int
    scope: str
    turn_id: str
    decision: str
    pattern: str
    name: str


@dataclass
class ChainRead:
    """What one read found. `token_row`: the token's and its runtime's columns (None: no such
    token, or not fused). `axes_row`/`argument_row`: the tool's (None: none found). `started`:
    `time.perf_counter()` when the decision's first read began (a decision's time runs from it)."""

    token_row: tuple[object, ...] | None = None
    sessions: dict[str, SessionSeen] = field(default_factory=dict)
    grants: list[GrantRow] = field(default_factory=list)
    version: int = 0
    axes_row: tuple[str, str, str] | None = None
    argument_row: tuple[str, str] | None = None
    started: float = 0.0


@functools.cache
def _sql(vendor: str, n_ids: int, n_skills: int, tool_sql: tuple[str, str] | None, *, fused: bool) -> str:
    """The statement for `n_ids` named sessions and either `n_skills` skills or one tool (its
    axes and subject SQL). Every row: the tag, the token's columns when fused (NULL but on
    T), then its own eight."""
    session_table = Session._meta.db_table
    grant_table = Grant._meta.db_table
    version_table = RuleSetVersion._meta.db_table
    runtime = TOKEN_RUNTIME if fused else "%s"
    pad = "NULL, " * TOKEN_COLUMNS if fused else ""
    ids = ", ".join(["%s"] * n_ids)
    parts = []
    prefix = ""
    if fused:
        columns, source = token_select()
        names = ", ".join(f"c{n}" for n in range(TOKEN_COLUMNS))
        prefix = f"WITH tok({names}) AS (SELECT {columns} {source}) "
        parts.append(f"SELECT 'T', {names}, {_NO_COLUMNS} FROM tok")  # noqa: S608 - no input in the text # nosec B608
    if tool_sql is not None:
        axes_sql, subject_sql = tool_sql
        parts += [
            f"SELECT 'A', {pad}{_INT}, {_INT}, {_INT}, a.side_effect_level, a.destructive_behavior, "  # noqa: S608 - no input in the text # nosec B608
            f"a.idempotency_behavior, {_TEXT}, {_TEXT} FROM ({axes_sql}) a",
            f"SELECT 'U', {pad}{_INT}, {_INT}, {_INT}, u.argument, u.kind, "  # noqa: S608 - no input in the text # nosec B608
            f"{_TEXT}, {_TEXT}, {_TEXT} FROM ({subject_sql}) u",
        ]
    holders = ""
    if n_ids:
        parts.append(
            f"SELECT 'S', {pad}id, CASE WHEN last_seen_at >= %s THEN 1 ELSE 0 END, {_INT}, "  # noqa: S608 - no input in the text # nosec B608
            f"session_id, principal, {_TEXT}, {_TEXT}, {_TEXT} FROM {session_table} "
            f"WHERE runtime_id = {runtime} AND session_id IN ({ids})"
        )
        # S12: a session idle past its TTL holds no grants, whatever its rows say.
        holders = (
            f" OR session_id IN (SELECT id FROM {session_table} WHERE runtime_id = {runtime} "  # noqa: S608 - no input in the text # nosec B608
            f"AND session_id IN ({ids}) AND last_seen_at >= %s)"
        )
    if tool_sql is not None:
        which = f"kind = '{GrantKind.TOOL.value}' AND server = %s AND skill = %s"
    elif n_skills:
        which = f"kind = '{GrantKind.SKILL.value}' AND skill IN ({', '.join(['%s'] * n_skills)})"
    else:
        which = ""
    if which:
        parts.append(
            f"SELECT 'G', {pad}id, session_id, approvers, scope, turn_id, decision, pattern, skill "  # noqa: S608 - no input in the text # nosec B608
            f"FROM {grant_table} WHERE runtime_id = {runtime} AND revoked_at IS NULL AND {which} "
            f"AND (expires_at IS NULL OR expires_at > %s) AND (scope = '{GrantScope.AGENT.value}'{holders})"
        )
    parts.append(
        f"SELECT 'V', {pad}version, {_INT}, {_INT}, {_TEXT}, {_TEXT}, {_TEXT}, {_TEXT}, {_TEXT} "  # noqa: S608 - no input in the text # nosec B608
        f"FROM {version_table} WHERE id = 1"
    )
    return prefix + " UNION ALL ".join(parts)


def chain_read(
    session_ids: Sequence[str | None],
    *,
    skills: Sequence[str] = (),
    tool: tuple[str, str] | None = None,
    runtime_pk: int | None = None,
    token_digest: str | None = None,
) -> ChainRead:
    """Run the read for `runtime_pk`, or fused behind the token whose hash is `token_digest`:
    the named sessions (a None or empty id names none), and the grants in force for `skills`
    or for `tool` (its server, "" for a runtime's own tool, and its name) with the tool's
    axes and subject argument as registry reads them (`registry.selectors.tool_facts_query`)."""
    started = time.perf_counter()
    fused = token_digest is not None
    ids = list(dict.fromkeys(sid for sid in session_ids if sid))
    names = sorted(set(skills)) if tool is None else []
    facts = None
    if tool is not None:
        facts = registry_selectors.tool_facts_query(
            runtime_pk=runtime_pk,
            name=tool[1],
            server=tool[0] or None,
            runtime_sql=TOKEN_RUNTIME if fused else "",
        )
    tool_sql = (facts.axes_sql, facts.subject_sql) if facts is not None else None
    sql = _sql(connection.vendor, len(ids), len(names), tool_sql, fused=fused)
    now = timezone.now()
    adapt = connection.ops.adapt_datetimefield_value
    on_runtime = [] if fused else [runtime_pk]
    params: list[object] = [token_digest] if fused else []
    if facts is not None:
        params += [*facts.axes_params, *facts.subject_params]
    if ids:
        params += [adapt(now - SEEN_RESOLUTION), *on_runtime, *ids]
    if tool is not None or names:
        params += on_runtime
        params += [*tool] if tool is not None else names
        params.append(adapt(now))
        if ids:
            params += [*on_runtime, *ids, adapt(now - session_idle_ttl())]
    rows = rawsql.fetchall_prepared(sql, params)
    return _found(rows, end=1 + (TOKEN_COLUMNS if fused else 0), started=started)


def _found(rows: list[tuple[object, ...]], *, end: int, started: float) -> ChainRead:
    read = ChainRead(started=started)
    for row in rows:
        tag = row[0]
        n1, n2, n3, t1, t2, t3, t4, t5 = row[end:]
        if tag == "S":
            read.sessions[t1] = SessionSeen(pk=n1, principal=t2, fresh=bool(n2))  # type: ignore[arg-type,index]
        elif tag == "G":
            read.grants.append(GrantRow(n1, n2, n3, t1, t2, t3, t4, t5))  # type: ignore[arg-type]
        elif tag == "V":
            read.version = n1  # type: ignore[assignment]
        elif tag == "A":
            read.axes_row = (t1, t2, t3)  # type: ignore[assignment]
        elif tag == "U":
            read.argument_row = (t1, t2)  # type: ignore[assignment]
        else:
            read.token_row = row[1:end]
    return read


# --- The sessions a decision names (S3, S12) ------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DecisionCall(ABC):
    """A decision by ids, as a runtime names it: its sessions, turn and principal, and (in
    each kind's subclass) what it decides."""

    session_id: str | None = None
    invoking_session_id: str | None = None
    turn_id: str | None = None
    principal: str | None = None

    @abstractmethod
    def read(self, *, runtime_pk: int | None = None, token_digest: str | None = None) -> ChainRead:
        """`chain_read` for this call: for `runtime_pk`, or fused behind `token_digest`."""


def sessions_find(
    runtime: AgentRuntime, call: DecisionCall, read: ChainRead | None = None
) -> tuple[ChainRead, int | None, int | None]:
    """The call's read (`read`: the fused one, already run) and the primary keys of its
    session and invoking session, found as every decision finds them. An invoking session
    never seen for this runtime is refused before anything is written (S3: a fork inherits
    from a session that exists; a decision never creates it). The session is created at
    first sight (S12: its principal fixed now) without reading again: the read found it
    absent, so it holds no grants. One that needs more (not seen within SEEN_RESOLUTION, idle
    past its TTL, a principal to fix or refuse, or created by another call meanwhile) is
    touched as `session_touch` does, and read again (its grants may have expired with the
    touch). In the common case (the session seen in the last minute under the same
    principal, or a fork) the read is the whole decision."""
    if read is None:
        read = call.read(runtime_pk=runtime.pk)
    session_id, invoking_session_id, principal = call.session_id, call.invoking_session_id, call.principal
    seen = read.sessions
    if invoking_session_id and invoking_session_id not in seen and invoking_session_id != session_id:
        raise UnknownInvokingSessionError(invoking_session_id)
    invoking = seen.get(invoking_session_id) if invoking_session_id else None
    invoking_pk = invoking.pk if invoking else None
    if not session_id:
        return read, None, invoking_pk
    found = seen.get(session_id)
    if found is not None and found.fresh and not (principal and found.principal != principal):
        session_pk = found.pk
    else:
        created = _session_first_seen(runtime, session_id, principal) if found is None else None
        if created is not None:
            session_pk = created.pk
        else:
            session = session_touch(runtime=runtime, session_id=session_id, principal=principal)
            if session is None:  # session_touch returns a session whenever an id is given
                raise RuntimeError(f"session {session_id!r} could not be read after it was touched")
            again = call.read(runtime_pk=runtime.pk)
            again.started = read.started  # the decision's time runs from its first read
            session_pk, read = session.pk, again
    if invoking_session_id == session_id:
        invoking_pk = session_pk
    return read, session_pk, invoking_pk


_Call = TypeVar("_Call", bound=DecisionCall)
_Decided = TypeVar("_Decided")


def decide_for_token(
    raw_token: str, call: _Call, decide: Callable[[AgentRuntime, _Call, ChainRead], _Decided]
) -> tuple[RuntimeToken, _Decided] | None:
    """`decide` for the runtime `raw_token` authenticates, with the token looked up in the
    decision's own read (the decision endpoints' hot path): the same path, the token's
    columns added to the same statement.

    None when `raw_token` is not the active token of an active runtime, exactly as
    `runtimes.selectors.token_authenticate` decides (the caller answers 401). Otherwise
    the token (its `last_used_at` kept as every authentication keeps it) and the
    decision. Nothing is cached: a revoke, a grant or a rule change holds on the next call.
    """
    if not token_looks_valid(raw_token):
        return None
    read = call.read(token_digest=token_hash(raw_token))
    if read.token_row is None:
        return None
    token = token_from_row(read.token_row)
    return token, decide(token.runtime, call, read)


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


# --- The grant layers (S2, U) -----------------------------------------------------------------------

# The grant layers of the chain, narrowest first.
LAYERS = ("turn", "session", "invoking_session", "agent")


def grant_layer(
    grant: GrantRow, session_pk: int | None, invoking_pk: int | None, turn_id: str | None
) -> str | None:
    """The layer `grant` answers for a call of these sessions and turn (None: another turn's)."""
    if grant.scope == GrantScope.AGENT:
        return "agent"
    if grant.scope == GrantScope.TURN:
        # A turn grant answers only that turn, of the session it was written to (the
        # session, or for a fork the invoking session: where its session answers land).
        holder = session_pk if session_pk is not None else invoking_pk
        if turn_id and grant.turn_id == turn_id and holder is not None and grant.session_pk == holder:
            return "turn"
        return None
    if session_pk is not None and grant.session_pk == session_pk:
        return "session"
    if invoking_pk is not None and grant.session_pk == invoking_pk:
        return "invoking_session"
    return None
