"""Browser pages for what answers left behind (S10): sessions and what they hold, clearing
and revoking them, one approval at a time or an agent's agent-wide ones. Every change asks
for confirmation first. Who sees what follows S13 through the selectors."""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from aimon_admin.approvals import rules, selectors, services
from aimon_admin.approvals.choices import GrantScope
from aimon_admin.approvals.models import Grant, Session
from aimon_admin.approvals.services.errors import AGENT_WIDE_ENDS
from aimon_admin.approvals.views import answer_label, approver_or_operator, just_answered_line
from aimon_admin.core.actors import Actor
from aimon_admin.core.plurals import counted
from aimon_admin.runtimes.models import AgentRuntime

CLEARED_MESSAGE = (
    "Session cleared: {count} approval removed.",
    "Session cleared: {count} approvals removed.",
)
REVOKED_MESSAGE = "Session approvals revoked: {count} removed."
AGENT_REVOKED_MESSAGE = "Agent-wide approvals revoked: {count} removed."
GRANT_REVOKED_MESSAGE = "Approval revoked."
GRANT_GONE_MESSAGE = "That approval was no longer in force."
UNDONE_MESSAGE = "Undone: your {how} of {label} is revoked; {runtime} asks again the next time."
ANSWERS = ("{count} answer", "{count} answers")
AGENT_WIDE_APPROVALS = ("{count} agent-wide approval", "{count} agent-wide approvals")


def _every_session(n: int, runtime: str) -> str:
    """`all 3 sessions of agent-one`, `the only session of agent-one`."""
    if n == 0:
        return f"every session of {runtime} (it has none yet)"
    return f"the only session of {runtime}" if n == 1 else f"all {n} sessions of {runtime}"


def _confirm(request: HttpRequest, grants: Sequence[Grant] = (), **page: str) -> HttpResponse:
    """The page that asks before a change to what answers left behind (S10): `page` is its
    title, effect, confirm_label and what is kept; `grants` the answers it takes back."""
    items = [f"{g.label}: {answer_label(g.decision, g.scope)}" for g in grants]
    context = {**page, "items": items, "cancel_url": "approvals:sessions", "danger": True}
    return render(request, "approvals/confirm.html", context)


@require_GET
@approver_or_operator
def session_list_view(request: HttpRequest) -> HttpResponse:
    sessions = selectors.sessions_visible_to(user=request.user).order_by("-last_seen_at", "-id")[:200]
    return render(request, "approvals/sessions.html", {"sessions": sessions})


def _visible_session(request: HttpRequest, pk: int) -> Session:
    return get_object_or_404(selectors.sessions_visible_to(user=request.user), pk=pk)


@require_GET
@approver_or_operator
def session_detail_view(request: HttpRequest, pk: int) -> HttpResponse:
    session = _visible_session(request, pk)
    skills = selectors.session_skills(session=session)
    verdicts = services.skills_decide(
        runtime=session.runtime, skills=skills, session=session, invoking_session=None, turn_id=None
    )
    index = rules.rule_index()
    rows = []
    for verdict in verdicts:
        rule = index.lookup(session.runtime_id, verdict.skill) if verdict.source == "RULE" else None
        rows.append({"verdict": verdict, "rule": rule})
    return render(
        request,
        "approvals/session.html",
        {
            "session": session,
            "rows": rows,
            "grants": selectors.session_grants(session=session),
            "agent_grants": selectors.agent_grants(runtime=session.runtime),
            "may_manage_agent": selectors.may_manage_agent_grants(user=request.user, runtime=session.runtime),
        },
    )


@require_http_methods(["GET", "POST"])
@approver_or_operator
def session_clear_view(request: HttpRequest, pk: int) -> HttpResponse:
    session = _visible_session(request, pk)
    if request.method == "POST":
        count = services.session_clear(
            runtime=session.runtime, session_id=session.session_id, actor=Actor.for_user(request.user)
        )
        messages.success(request, counted(CLEARED_MESSAGE, count))
        return redirect("approvals:session", pk=session.pk)
    grants = list(selectors.session_grants(session=session))
    return _confirm(
        request,
        title=f"Clear session {session.session_id}?",
        effect=(
            f"Starts this session over, as the agent's own /clear does. Removes the "
            f"{counted(ANSWERS, len(grants))} this session holds (its turn and session "
            "approvals and denials): the runtime asks again about each. The audit log "
            "records it as a clear."
        ),
        kept=(
            f"Stays: the agent-wide approvals of {session.runtime.name} (each holds "
            f"{AGENT_WIDE_ENDS}), the rules, and the audit log's record of every answer."
        ),
        confirm_label="Clear session",
        grants=grants,
    )


@require_http_methods(["GET", "POST"])
@approver_or_operator
def session_revoke_view(request: HttpRequest, pk: int) -> HttpResponse:
    session = _visible_session(request, pk)
    if request.method == "POST":
        removed, _ = services.session_revoke(
            runtime=session.runtime,
            session_id=session.session_id,
            agent=False,
            actor=Actor.for_user(request.user),
        )
        messages.success(request, REVOKED_MESSAGE.format(count=removed))
        return redirect("approvals:session", pk=session.pk)
    grants = list(selectors.session_grants(session=session))
    return _confirm(
        request,
        title=f"Revoke the approvals of session {session.session_id}?",
        effect=(
            f"Takes back the {counted(ANSWERS, len(grants))} this session holds (its turn and "
            "session approvals and denials): the runtime asks again about each. These are the "
            "answers Clear would remove, but the audit log records a revocation by you, not a "
            "clear: use it when an answer should not have been given."
        ),
        kept=(
            f"Stays: the agent-wide approvals of {session.runtime.name} (only Revoke agent-wide "
            "removes them), the rules, and the audit log's record of every answer."
        ),
        confirm_label="Revoke session approvals",
        grants=grants,
    )


def _grant_for(request: HttpRequest, pk: int) -> Grant:
    """An active grant this person may revoke; anyone else's is a 404, as its session is
    (S13: someone else's object is not shown to exist)."""
    grant = get_object_or_404(Grant.objects.active().select_related("runtime", "session"), pk=pk)
    if grant.scope == GrantScope.AGENT:
        visible = selectors.may_manage_agent_grants(user=request.user, runtime=grant.runtime)
    else:
        visible = selectors.sessions_visible_to(user=request.user).filter(pk=grant.session_id).exists()
    if not visible:
        raise Http404
    return grant


@require_http_methods(["GET", "POST"])
@approver_or_operator
def grant_revoke_view(request: HttpRequest, pk: int) -> HttpResponse:
    grant = _grant_for(request, pk)
    back = (
        redirect("approvals:agent", name=grant.runtime.name)
        if grant.scope == GrantScope.AGENT
        else redirect("approvals:session", pk=grant.session_id)
    )
    if request.method == "POST":
        revoked = services.grant_revoke(grant=grant, actor=Actor.for_user(request.user))
        messages.success(request, GRANT_REVOKED_MESSAGE if revoked else GRANT_GONE_MESSAGE)
        return back
    where = "every session of this agent" if grant.scope == GrantScope.AGENT else "this session"
    return _confirm(
        request,
        title=f"Revoke {answer_label(grant.decision, grant.scope)} for {grant.label}?",
        effect=f"The runtime will ask again about {grant.label} in {where}.",
        confirm_label="Revoke approval",
    )


@require_POST
@approver_or_operator
def grant_undo_view(request: HttpRequest, pk: int) -> HttpResponse:
    """S14: Undo on the inbox's line for a request just answered: that allow's revoke, by the
    person who gave it, on a request they closed (anything else is a 404). Its effect is
    written beside the button, which opens first (the confirmation every revoke has). htmx
    gets the line redrawn with what happened; a plain form, the inbox with it as a message."""
    mine = Grant.objects.filter(granted_by=request.user, request__answered_by=request.user)
    grant = get_object_or_404(mine.select_related("runtime", "session"), pk=pk)
    try:
        revoked = services.grant_undo(grant=grant, user=request.user)
    except services.NotAllowedError as exc:
        note = ("error", str(exc))
    else:
        how = answer_label(grant.decision, grant.scope)
        done = UNDONE_MESSAGE.format(how=how, label=grant.label, runtime=grant.runtime.name)
        note = ("success", done) if revoked else ("info", GRANT_GONE_MESSAGE)
    if not request.htmx:
        messages.add_message(request, messages.ERROR if note[0] == "error" else messages.SUCCESS, note[1])
        return redirect("approvals:inbox")
    approval = selectors.just_answered_one(user=request.user, pk=grant.request_id)
    line = just_answered_line(approval, request.user)
    return render(request, "approvals/inbox.html#answered-line", {"line": line, "notes": [note]})


@require_GET
@approver_or_operator
def agent_grants_view(request: HttpRequest, name: str) -> HttpResponse:
    runtime = get_object_or_404(AgentRuntime, name=name)
    if not selectors.may_manage_agent_grants(user=request.user, runtime=runtime):
        raise PermissionDenied
    return render(
        request,
        "approvals/agent.html",
        {
            "runtime": runtime,
            "grants": selectors.agent_grants(runtime=runtime),
            "sessions_reached": selectors.runtime_session_count(runtime=runtime),
        },
    )


@require_http_methods(["GET", "POST"])
@approver_or_operator
def agent_revoke_view(request: HttpRequest, name: str) -> HttpResponse:
    runtime = get_object_or_404(AgentRuntime, name=name)
    if not selectors.may_manage_agent_grants(user=request.user, runtime=runtime):
        raise PermissionDenied
    if request.method == "POST":
        count = services.agent_grants_revoke(runtime=runtime, actor=Actor.for_user(request.user))
        messages.success(request, AGENT_REVOKED_MESSAGE.format(count=count))
        return redirect("approvals:agent", name=runtime.name)
    grants = list(selectors.agent_grants(runtime=runtime))
    return _confirm(
        request,
        title=f"Revoke every agent-wide approval of {runtime.name}?",
        effect=(
            f"Removes {counted(AGENT_WIDE_APPROVALS, len(grants))} from "
            f"{_every_session(selectors.runtime_session_count(runtime=runtime), runtime.name)}; "
            "each session is asked again."
        ),
        confirm_label="Revoke agent-wide",
        grants=grants,
    )
