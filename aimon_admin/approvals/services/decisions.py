"""A skill decision (S2, S3): the chain evaluated for skills from the chain's one read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aimon_admin.approvals import policy, rules
from aimon_admin.approvals.choices import (
    DecisionSource,
    GrantDecision,
    GrantScope,
    RuleAction,
    SkillDecision,
)
from aimon_admin.approvals.models import Session
from aimon_admin.approvals.services.chain_read import (
    LAYERS,
    ChainRead,
    chain_read,
    grant_layer,
    sessions_find,
)
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.selectors import token_from_row
from aimon_admin.runtimes.tokens import token_hash, token_looks_valid

# --- The chain (S2, S3) ------------------------------------------------------------------------


@dataclass(frozen=True)
class SkillVerdict:
    skill: str
    decision: SkillDecision
    source: DecisionSource
    widest_scope: GrantScope
    approvers: int = 1  # P3: how many people must allow it, when a rule asks about it


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
    `chain_read` as every decision is. Writes nothing."""
    ids = [s.session_id for s in (session, invoking_session) if s is not None]
    read = chain_read(ids, skills=skills, runtime_pk=runtime.pk)
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
    read = chain_read((session_id, invoking_session_id), skills=skills, runtime_pk=runtime.pk)
    return _decide(runtime, read, skills, session_id, invoking_session_id, principal, turn_id)


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
    read = chain_read((session_id, invoking_session_id), skills=skills, token_digest=token_hash(raw_token))
    if read.token_row is None:
        return None
    token = token_from_row(read.token_row)
    verdicts = _decide(token.runtime, read, skills, session_id, invoking_session_id, principal, turn_id)
    return token, verdicts


def _decide(
    runtime: AgentRuntime,
    read: ChainRead,
    skills: Sequence[str],
    session_id: str | None,
    invoking_session_id: str | None,
    principal: str | None,
    turn_id: str | None,
) -> list[SkillVerdict]:
    """The one decision path: the sessions found as every decision finds them
    (`sessions_find`), read again if one was touched, then the chain."""
    found = sessions_find(
        runtime, read, session_id=session_id, invoking_session_id=invoking_session_id, principal=principal
    )
    if found.read_again:
        read = chain_read((session_id, invoking_session_id), skills=skills, runtime_pk=runtime.pk)
    return _verdicts(
        runtime.pk, skills, read, session_pk=found.session_pk, invoking_pk=found.invoking_pk, turn_id=turn_id
    )


def _verdicts(
    runtime_pk: int,
    skills: Sequence[str],
    read: ChainRead,
    *,
    session_pk: int | None,
    invoking_pk: int | None,
    turn_id: str | None,
) -> list[SkillVerdict]:
    held: dict[str, dict[str, tuple[str, int]]] = {skill: {} for skill in skills}
    for grant in read.grants:
        layer = grant_layer(grant, session_pk, invoking_pk, turn_id)
        if layer is not None:
            held[grant.name][layer] = (grant.decision, grant.approvers)
    index = rules.rule_index(read.version)
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


def _grant(held: tuple[str, int] | None, floor: int) -> GrantDecision | None:
    if held is None:
        return None
    decision, approvers = held
    if decision == GrantDecision.ALLOW and approvers < floor:
        return None
    return GrantDecision(decision)
