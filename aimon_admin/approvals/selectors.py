"""Reads for approvals, scoped to the person asking (S13): one rule decides visibility
for the inbox, the request pages and the API alike."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import policy, tool_answers, tool_policy
from aimon_admin.approvals.choices import GrantKind, GrantOrigin, GrantScope, RequestKind, RequestStatus
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant, Session
from aimon_admin.approvals.subject_patterns import pattern_choices
from aimon_admin.approvals.tool_rules import tool_rule_index
from aimon_admin.registry import policy as registry_policy
from aimon_admin.registry import selectors as registry_selectors
from aimon_admin.registry.choices import SubjectKind
from aimon_admin.registry.models import Tool
from aimon_admin.runtimes.models import AgentRuntime

_REQUEST_RELATIONS = ("runtime", "session", "invoking_session", "answered_by")


def request_list_visible_to(*, user: User) -> QuerySet[ApprovalRequest]:
    """Requests this person may see and answer (S13): their own (by principal); for
    operators every request; for a runtime's owner, that runtime's requests whose
    principal is nobody here. Auditors answer nothing and see none here."""
    requests = ApprovalRequest.objects.select_related(*_REQUEST_RELATIONS).prefetch_related(
        Prefetch("items", queryset=request_items())
    )
    if not user.is_authenticated or not user.is_active:
        return requests.none()
    if user.has_role(Role.OPERATOR):
        return requests
    if not user.has_role(Role.APPROVER):
        return requests.none()
    principal_is_user = Exists(User.objects.filter(username=OuterRef("principal"), is_active=True))
    return requests.annotate(principal_is_user=principal_is_user).filter(
        Q(principal=user.username) | (Q(runtime__owner=user) & Q(principal_is_user=False))
    )


def request_items() -> QuerySet[ApprovalItem]:
    """A request's items as its pages show them: in order, each with who answered it (by
    position alone: the items' default order by request would join the requests again)."""
    return ApprovalItem.objects.select_related("answered_by").order_by("position")


def request_visible_to(*, user: User, pk: Any) -> ApprovalRequest | None:
    """One request this person may see (S13: `request_list_visible_to` decides), with what
    that list reads with it (its relations, its items). None when they may not see it (or it
    does not exist)."""
    return request_list_visible_to(user=user).filter(pk=pk).first()


def pending_requests_for(*, user: User) -> QuerySet[ApprovalRequest]:
    """What the inbox shows: open requests, soonest to expire first. Only reads: a request
    past its deadline is not listed (S9: it is as good as aborted); closing it is
    `services.requests_expire_due`'s work (the beat task's, and the inbox's before it reads)."""
    return (
        request_list_visible_to(user=user)
        .filter(status=RequestStatus.PENDING, expires_at__gt=timezone.now())
        .order_by("expires_at", "created_at")
    )


JUST_ANSWERED_SHOWN = 5


def just_answered_by(*, user: User) -> list[ApprovalRequest]:
    """The requests `user` closed with their answer in the last few minutes, newest first:
    the inbox says what became of a card instead of letting it vanish, and offers to undo an
    allow it wrote (S14), so each item comes with its grant."""
    since = timezone.now() - policy.JUST_ANSWERED_FOR
    return list(
        ApprovalRequest.objects.filter(answered_by=user, answered_at__gte=since)
        .exclude(status=RequestStatus.PENDING)
        .select_related("runtime", "session", "invoking_session")
        .prefetch_related(Prefetch("items", queryset=_items_with_grants()))
        .order_by("-answered_at")[:JUST_ANSWERED_SHOWN]
    )


def just_answered_one(*, user: User, pk: Any) -> ApprovalRequest:
    """One request `user` closed, as `just_answered_by` reads it, whatever its age: the line
    an undo redraws."""
    return (
        ApprovalRequest.objects.select_related("runtime", "session", "invoking_session")
        .prefetch_related(Prefetch("items", queryset=_items_with_grants()))
        .get(pk=pk, answered_by=user)
    )


def _items_with_grants() -> QuerySet[ApprovalItem]:
    return ApprovalItem.objects.select_related("grant", "grant__session").order_by("position")


def inbox_version(requests: list[ApprovalRequest]) -> str:
    """A short fingerprint of what the inbox shows, so a poll can answer 'unchanged'."""
    parts = [
        f"{r.pk}:{r.status}:{'E' if r.escalated_at else ''}:"
        # P3: an allow recorded on an item that needs several people changes the card too.
        + ",".join(f"{i.skill}={i.decision}:{i.allows_given}" for i in r.items.all())
        for r in requests
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def runtime_session_count(*, runtime: AgentRuntime) -> int:
    """How many sessions an agent-wide answer reaches today (and every future one, S5)."""
    return Session.objects.filter(runtime=runtime).count()


def sessions_visible_to(*, user: User) -> QuerySet[Session]:
    sessions = Session.objects.select_related("runtime").annotate(
        active_grants=Count("grants", filter=Q(grants__revoked_at__isnull=True))
    )
    if user.has_role(Role.OPERATOR):
        return sessions
    if user.has_role(Role.APPROVER):
        return sessions.filter(principal=user.username)
    return sessions.none()


def session_skills(*, session: Session) -> list[str]:
    """The skills worth showing for a session: any it holds a grant for, any its runtime
    holds agent-wide, and any it was asked about. Skills only: a tool's grants and requests
    are not skills, whatever they are named."""
    skills = set(
        Grant.objects.active()
        .filter(Q(session=session) | Q(runtime=session.runtime, scope=GrantScope.AGENT), kind=GrantKind.SKILL)
        .values_list("skill", flat=True)
    )
    skills |= set(
        ApprovalItem.objects.filter(
            Q(request__session=session) | Q(request__invoking_session=session),
            request__kind=RequestKind.SKILL,
        ).values_list("skill", flat=True)[:500]
    )
    return sorted(skills)


def agent_grants(*, runtime: AgentRuntime) -> QuerySet[Grant]:
    return (
        Grant.objects.active()
        .filter(runtime=runtime, scope=GrantScope.AGENT)
        .select_related("granted_by", "request")
        .order_by("skill")
    )


ESCALATED_IN_FORCE_LIMIT = 50


def escalated_grants_in_force(*, limit: int = ESCALATED_IN_FORCE_LIMIT) -> int:
    """How many escalated grants are in force, counted up to `limit` + 1 (show "50+").

    Active AGENT grants are at most one per runtime and skill (a partial unique index
    the database can read), so this stays small however long the history is.
    """
    return (
        Grant.objects.filter(scope=GrantScope.AGENT, revoked_at__isnull=True, origin=GrantOrigin.ESCALATION)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .values("pk")[: limit + 1]
        .count()
    )


def session_grants(*, session: Session) -> QuerySet[Grant]:
    return (
        Grant.objects.active().filter(session=session).select_related("granted_by").order_by("skill", "scope")
    )


def may_manage_agent_grants(*, user: User, runtime: AgentRuntime) -> bool:
    """Revoke agent-wide: operators and the runtime's owner (S13)."""
    return user.is_active and (user.has_role(Role.OPERATOR) or runtime.owner_id == user.pk)


KNOWN_SKILLS_LIMIT = 10_000


def known_skills(*, runtime: AgentRuntime | None = None) -> list[str]:
    """Skill names seen so far, in approval requests and in grants (of one runtime, or of
    every runtime), sorted; what a rule's pattern is measured against before it is saved."""
    items = ApprovalItem.objects.filter(request__kind=RequestKind.SKILL).order_by()
    grants = Grant.objects.filter(kind=GrantKind.SKILL).order_by()
    if runtime is not None:
        items = items.filter(request__runtime=runtime)
        grants = grants.filter(runtime=runtime)
    names = items.values_list("skill", flat=True).union(grants.values_list("skill", flat=True))
    return list(names.order_by("skill")[:KNOWN_SKILLS_LIMIT])


# --- Tool requests (U2, U3) ---------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCallPatterns:
    """A tool request's tool as it stands now (its axes, read when the request is shown or
    answered, so a tool found destructive since is never granted wholesale), and the subject
    patterns its answers may carry (U3): an allow's never reach what a rule needs more
    people for than this request's answer has (P3)."""

    axes: registry_policy.ToolAxes
    registered: bool
    allow: list[str]
    deny: list[str]
    kind: SubjectKind = SubjectKind.TEXT  # how the tool's subject is read (U1)
    # P3: the rules needing more people than this request's answer has, which no allow offered reaches
    floors: tuple[tool_policy.ToolRuleSpec, ...] = ()


def tool_call_patterns(*, request: ApprovalRequest) -> ToolCallPatterns:
    found = registry_selectors.tool_axes(
        runtime=request.runtime, name=request.tool, server=request.server or None
    )
    axes = found or registry_policy.UNREGISTERED  # T9
    kind = registry_selectors.subject_argument_for(request.server, request.tool).kind
    people = max((item.approvers for item in request.items.all()), default=1)
    floors = tool_rule_index().floor_rules(
        runtime_id=request.runtime_id, server=request.server, tool=request.tool, above=people
    )
    beyond = [rule.pattern for rule in floors]
    return ToolCallPatterns(
        axes=axes,
        registered=found is not None,
        allow=pattern_choices(request.subject, axes, kind=kind, beyond=beyond),
        deny=tool_answers.deny_patterns(request.subject, axes, kind),
        kind=kind,
        floors=tuple(floors),
    )


def tool_for_request(*, request: ApprovalRequest) -> Tool | None:
    """The registered tool a tool request is about (its server, trust and raw claims shown
    to the approver, U2), or None: nobody registered it (T9)."""
    tool = registry_selectors.tool_lookup(
        runtime=request.runtime, name=request.tool, server=request.server or None
    )
    if tool is not None and tool.server_id is not None:
        tool = Tool.objects.select_related("server").get(pk=tool.pk)
    return tool
