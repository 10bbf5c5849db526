"""A skill decision (S2, S3): the chain evaluated for skills from the chain's one read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aimon_admin.approvals import policy, rules
from aimon_admin.approvals.choices import (
    DecisionSource,
    GrantDecision,
    GrantScope,
    RequestKind,
    RuleAction,
    SkillDecision,
)
from aimon_admin.approvals.models import Session
from aimon_admin.approvals.services.chain_read import (
    ChainRead,
    DecisionCall,
    chain_read,
    grant_layer,
    sessions_find,
)
from aimon_admin.core import metrics
from aimon_admin.runtimes.models import AgentRuntime

# --- The chain (S2, S3) ------------------------------------------------------------------------


@dataclass(frozen=True)
class SkillVerdict:
    skill: str
    decision: SkillDecision
    source: DecisionSource
    widest_scope: GrantScope
    approvers: int = 1  # P3: how many people must allow it, when a rule asks about it


@dataclass(frozen=True, kw_only=True)
class SkillCall(DecisionCall):
    """A skill decision by ids (`POST /api/v1/skill-decisions`): the skills asked about."""

    skills: Sequence[str]

    def read(self, *, runtime_pk: int | None = None, token_digest: str | None = None) -> ChainRead:
        ids = (self.session_id, self.invoking_session_id)
        return chain_read(ids, skills=self.skills, runtime_pk=runtime_pk, token_digest=token_digest)


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
    call = SkillCall(
        skills=skills,
        session_id=session.session_id if session else None,
        invoking_session_id=invoking_session.session_id if invoking_session else None,
        turn_id=turn_id,
    )
    return _verdicts(
        runtime.pk,
        call,
        call.read(runtime_pk=runtime.pk),
        session.pk if session else None,
        invoking_session.pk if invoking_session else None,
    )


def decide_skills(
    runtime: AgentRuntime, call: SkillCall, read: ChainRead | None = None
) -> list[SkillVerdict]:
    """A decision by ids, the one path: the call's read (`read`: the fused one of
    `decide_for_token`), the sessions found as every decision finds them, then the chain.
    Counted here, where every runtime's skill decision passes (core.metrics)."""
    read, session_pk, invoking_pk = sessions_find(runtime, call, read)
    verdicts = _verdicts(runtime.pk, call, read, session_pk, invoking_pk)
    metrics.decisions_observe(RequestKind.SKILL, read.started, [(v.decision, v.source) for v in verdicts])
    return verdicts


def _verdicts(
    runtime_pk: int, call: SkillCall, read: ChainRead, session_pk: int | None, invoking_pk: int | None
) -> list[SkillVerdict]:
    held: dict[str, dict[str, tuple[str, int]]] = {skill: {} for skill in call.skills}
    for grant in read.grants:
        layer = grant_layer(grant, session_pk, invoking_pk, call.turn_id)
        if layer is not None:
            held[grant.name][layer] = (grant.decision, grant.approvers)
    index = rules.rule_index(read.version)
    verdicts = []
    for skill in call.skills:
        rule = index.lookup(runtime_pk, skill)
        # P3: under a rule that asks several people, an ALLOW fewer people gave answers nothing.
        floor = rule.approvers if rule is not None and rule.action == RuleAction.ASK else 1
        layers = {
            layer: GrantDecision(decision)
            for layer, (decision, approvers) in held[skill].items()
            if decision != GrantDecision.ALLOW or approvers >= floor
        }
        decision, source = policy.chain_decide(
            policy.Layers(**layers, rule=rule.action if rule else None)  # type: ignore[arg-type]
        )
        widest = rule.widest_scope if rule else GrantScope.AGENT
        verdicts.append(
            SkillVerdict(skill, decision, source, GrantScope(widest), rule.approvers if rule else 1)
        )
    return verdicts
