"""Browser pages for approval requests: the inbox and a request's own page, where a person
answers (sessions and revocation are session_views.py's, the rules page rule_views.py's).
Who sees what follows S13 through the selectors; the server refuses what a page does not
offer."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from aimon_admin.approvals import selectors, services, tool_answers, tool_rule_grammar
from aimon_admin.approvals.choices import Answer, GrantDecision, GrantScope, ItemScope, RequestKind
from aimon_admin.approvals.forms import AnswerForm
from aimon_admin.approvals.inbox_filter import InboxFilter, InboxFilterError, bad_filter
from aimon_admin.approvals.models import ApprovalAllow, ApprovalRequest
from aimon_admin.approvals.request_timeline import request_timeline
from aimon_admin.approvals.services.answers import answers_for, user_may_grant_agent
from aimon_admin.approvals.services.errors import AGENT_WIDE_ENDS, ESCALATION_REACH, REQUEST_DENY_REACH
from aimon_admin.approvals.services.escalation import request_escalate_if_due
from aimon_admin.approvals.services.request_views import request_view_record
from aimon_admin.approvals.services.requests import request_shape
from aimon_admin.approvals.services.revocation import undo_refusal
from aimon_admin.approvals.services.two_person import ALLOW_ANSWERS, request_owner
from aimon_admin.approvals.tool_card import tool_call_card
from aimon_admin.core.actors import Actor

ANSWERED_MESSAGE = "Answered: {skills}."
ALREADY_ANSWERED_MESSAGE = "{skill} was already answered by {who}: {how}."
# P3: an allow recorded on an item that needs more people.
ALLOW_RECORDED_MESSAGE = (
    "Your allow of {skill} is recorded: {given} of {needed} approvals. It waits for another person."
)
FAILED_MESSAGE = "{skill} could not be saved and is still waiting: {why}"
# The allow button that gives an answer of each scope (a session's is the default).
ALLOWED_AS = {
    ItemScope.CALL: Answer.ALLOW_CALL,
    GrantScope.TURN: Answer.ALLOW_ONCE,
    GrantScope.AGENT: Answer.ALLOW_AGENT,
}
# S14: what Undo does, beside its button.
UNDO_EFFECT = (
    "Revokes your {how} of {label} {where}: {runtime} asks again the next time. {told}: what it "
    "already ran with it stays run."
)
DISMISSED_MESSAGE = (
    "The rest denied: what was still unanswered is denied for the session; the request is closed."
)
# S13, shown on a request with no session to anyone who may not answer beyond it.
DENY_REQUEST_ONLY_HELP = (
    "This request has no session, so an answer here would hold for every session of {runtime}. "
    "Only an operator or the runtime's owner may give that. You may refuse it with Deny this "
    "request: the runtime is told Deny for this request, and nothing is stored."
)


def answer_label(decision: str, scope: str) -> str:
    """How an item was answered, in the words of the buttons."""
    if decision == GrantDecision.DENY:
        return Answer.DENY_REQUEST.label if scope == ItemScope.REQUEST else Answer.DENY.label
    return ALLOWED_AS.get(scope, Answer.ALLOW_SESSION).label


def _skill_reach(approval: ApprovalRequest, escalates: bool, offered: set[str]) -> list[dict[str, str]]:
    """What each button of a skill request the card offers reaches, written beside it in the
    buttons' order, Always allow aside (S5): where a session answer lands (the session, a
    fork's invoking session, or, with neither, every session)."""
    runtime = approval.runtime.name
    if escalates:
        where = f"every session of {runtime} (this request has no session: {ESCALATION_REACH})"
    elif approval.session is not None:
        where = f"session {approval.session.session_id}"
    else:
        where = (
            f"session {approval.invoking_session.session_id}, which launched this sub-agent, "
            "and every sub-agent it launches"
        )
    reach = {
        Answer.ALLOW_ONCE: f"This turn only ({approval.turn_id}), in {where}.",
        Answer.ALLOW_SESSION: f"Allows it in {where}, until the session is cleared, revoked or idle too long."
        if not escalates
        else f"Allows it in {where}.",
        Answer.DENY: f"Refuses it in {where}; a Deny made now beats older approvals.",
        Answer.DENY_REQUEST: f"{REQUEST_DENY_REACH[:1].upper()}{REQUEST_DENY_REACH[1:]}.",
    }
    return [
        {"value": answer.value, "label": answer.label, "text": reach[answer]}
        for answer in Answer
        if answer.value in offered and answer in reach
    ]


def approver_or_operator(view: Any) -> Any:
    """Approvers and operators answer; which requests each sees is S13's (selectors)."""
    return login_required(permission_required("approvals.answer_approvalrequest", raise_exception=True)(view))


# --- The inbox ----------------------------------------------------------------------------------


def _card(request: HttpRequest, approval: ApprovalRequest) -> dict[str, Any]:
    """Everything a request card shows, the reach of each button included (S5)."""
    user = request.user
    shape = request_shape(approval)
    # A tool request's patterns and axes are read once, for its buttons and its card (U3).
    patterns = selectors.tool_call_patterns(request=approval) if approval.kind == RequestKind.TOOL else None
    items = []
    for item in approval.items.all():
        offered = answers_for(user, approval, item, patterns=patterns) if not item.answered else []
        items.append(
            {
                "item": item,
                "offered": [{"value": a.value, "label": a.label} for a in offered],
                "answered_as": answer_label(item.decision, item.scope) if item.answered else "",
            }
        )
    _allows_so_far(user, approval, items)
    # Every answer the card offers (an answered item offers none).
    offered = {option["value"] for entry in items for option in entry["offered"]}
    offers_agent = Answer.ALLOW_AGENT in offered
    deny_request_only = shape.escalates and Answer.DENY_REQUEST in offered
    common = None
    open_items = [entry for entry in items if not entry["item"].answered]
    if len(open_items) > 1:
        sets = [tuple(a["value"] for a in entry["offered"]) for entry in open_items]
        common = [a for a in open_items[0]["offered"] if all(a["value"] in s for s in sets)]
    # S5: the reach is shown beside the agent-wide button and the escalation note only.
    sessions_reached = (
        selectors.runtime_session_count(runtime=approval.runtime) if offers_agent or shape.escalates else 0
    )
    return {
        "approval": approval,
        "items": items,
        "offers_agent": offers_agent,
        "answer_all": common,
        "sessions_reached": sessions_reached,
        "escalates": shape.escalates,
        "deny_request_only": deny_request_only and not user_may_grant_agent(user, approval.runtime),
        "deny_request_help": DENY_REQUEST_ONLY_HELP.format(runtime=approval.runtime.name),
        "agent_wide_ends": AGENT_WIDE_ENDS,  # S5/S6: what ends an agent-wide grant
        "is_fork": approval.is_fork,
        "tool": tool_call_card(approval, patterns) if patterns is not None else None,
        # Every button's reach beside it (S5): a tool card has its own (tool_card.py), and
        # Always allow keeps its longer note (reach-<id>).
        "reach": _skill_reach(approval, shape.escalates, offered) if patterns is None else [],
        "on_page": False,  # the request's own page: its title links nowhere
    }


def _allows_so_far(user: Any, approval: ApprovalRequest, items: list[dict[str, Any]]) -> None:
    """P3: on each open item a rule needs several people to allow, who has allowed so far and
    when ("1 of 2 approvals"). Someone who already allowed, or whose request it is, is offered
    only the denials; a later allow is offered only as the first person allowed."""
    several = [entry for entry in items if entry["item"].needs_several and not entry["item"].answered]
    if not several:
        return
    given: dict[int, list[ApprovalAllow]] = {}
    records = ApprovalAllow.objects.filter(item__in=[entry["item"] for entry in several])
    for record in records.select_related("user").order_by("created_at", "id"):
        given.setdefault(record.item_id, []).append(record)
    own_request = request_owner(approval) == user.username
    for entry in several:
        item, records = entry["item"], given.get(entry["item"].pk, [])
        mine = any(record.user_id == user.pk for record in records)
        first = records[0] if records else None
        if mine or own_request:
            entry["offered"] = [o for o in entry["offered"] if o["value"] not in ALLOW_ANSWERS]
        elif first is not None:
            entry["offered"] = [
                o for o in entry["offered"] if o["value"] not in ALLOW_ANSWERS or o["value"] == first.answer
            ]
        entry["allows"] = {
            "given": len(records),
            "needed": item.approvers,
            "records": records,
            "mine": mine,
            "own_request": own_request and not mine,
            "first_by": first.user.username if first else "",
            # A tool request's pattern choice starts where the first person's allow was.
            "first_pattern": first.pattern if first and first.answer != Answer.ALLOW_CALL else None,
            "first_as": Answer(first.answer).label + (f" ({first.pattern})" if first.pattern else "")
            if first
            else "",
        }


def _inbox_context(request: HttpRequest) -> dict[str, Any]:
    shown = InboxFilter.parse(request.GET)  # before any write: a bad filter changes nothing
    # Requests past their deadline are closed (S9) before the inbox is read.
    services.requests_expire_due(limit=100, among=selectors.request_list_visible_to(user=request.user))
    pending = list(shown.apply(selectors.pending_requests_for(user=request.user), user=request.user))
    for approval in pending:  # P2, on sight as expiry is: where no beat runs (make run), this sends them
        request_escalate_if_due(approval)
    # What became of the cards this person's answers closed: a line each, for a while.
    answered = selectors.just_answered_by(user=request.user)
    lines = [just_answered_line(approval, request.user) for approval in answered]
    return {
        "cards": [_card(request, approval) for approval in pending],
        "just_answered": lines,
        # Not what an undo changed: the line it redrew keeps saying what happened until the
        # inbox changes otherwise (another tab's Undo, refused, says why).
        "version": selectors.inbox_version(pending) + "".join(f"-{a.pk.hex[:6]}" for a in answered),
        "shown": shown,
    }


def just_answered_line(approval: ApprovalRequest, user: Any) -> dict[str, Any]:
    """The inbox's line for a request `user` closed: each item and how it was answered, and
    on an allow that person's answer wrote, Undo while they may (S14) or what became of it."""
    answers = []
    for item in approval.items.all():
        if not item.decision:
            continue
        # The grant this answer wrote (not another request's that settled it, S2).
        grant = item.grant if item.grant is not None and item.grant.request_id == approval.pk else None
        revoked = grant is not None and grant.revoked_at is not None
        undo = grant is not None and not revoked and undo_refusal(grant=grant, user=user) is None
        answers.append(
            {
                "skill": item.skill,
                "how": answer_label(item.decision, item.scope),
                "grant": grant,
                "revoked": revoked,
                "undo": undo,
                "undo_effect": _undo_effect(approval, grant) if undo else "",
            }
        )
    return {"approval": approval, "answers": answers}


def _undo_effect(approval: ApprovalRequest, grant: Any) -> str:
    """What Undo does, written before the click (S14): where the allow is taken back, and that
    what the agent already did with it stays done."""
    runtime = approval.runtime.name
    if grant.scope == GrantScope.AGENT:
        where = f"in every session of {runtime}"
    elif grant.scope == GrantScope.TURN:
        where = f"for turn {grant.turn_id} of session {grant.session.session_id}"
    else:
        where = f"in session {grant.session.session_id}"
    told = (
        f"{runtime} has already been told Allow"
        if approval.answer_sent_at is not None
        else f"{runtime} may already have been told Allow"
    )
    how = answer_label(grant.decision, grant.scope)
    return UNDO_EFFECT.format(how=how, label=grant.label, where=where, runtime=runtime, told=told)


@require_GET
@approver_or_operator
def inbox_view(request: HttpRequest, poll: bool = False) -> HttpResponse:
    """The inbox; `poll` is what htmx polls: 204 (nothing swapped) while it is unchanged."""
    try:
        context = _inbox_context(request)
    except InboxFilterError as error:
        return bad_filter(request, str(error))
    if poll and request.GET.get("v") == context["version"]:
        return HttpResponse(status=204)
    partial = "#inbox" if poll or request.htmx else ""
    return render(request, f"approvals/inbox.html{partial}", context)


def _visible_request(request: HttpRequest, pk: Any) -> ApprovalRequest:
    approval = selectors.request_visible_to(user=request.user, pk=pk)
    if approval is None:  # someone else's is a 404 (S13)
        raise Http404
    return approval


@require_GET
@approver_or_operator
def request_detail_view(request: HttpRequest, pk: Any) -> HttpResponse:
    approval = _visible_request(request, pk)
    services.request_expire_if_due(approval)
    request_escalate_if_due(approval)
    request_view_record(request=approval, user=request.user)  # who first opened it; answers nothing
    return render(request, "approvals/request.html", _request_page(request, approval))


def _request_page(request: HttpRequest, approval: ApprovalRequest, **extra: Any) -> dict[str, Any]:
    """The request's own page: its card in full, then its timeline."""
    card = _card(request, approval)
    card["on_page"] = True
    labels = {entry["item"].pk: entry["answered_as"] for entry in card["items"] if entry["answered_as"]}
    return {"card": card, "timeline": request_timeline(approval, request.user, labels), **extra}


@require_POST
@approver_or_operator
def request_answer_view(request: HttpRequest, pk: Any) -> HttpResponse:
    approval = _visible_request(request, pk)
    form = AnswerForm(request.POST)
    notes: list[tuple[str, str]] = []
    outcome: services.AnswerOutcome | None = None
    if not form.is_valid():
        notes.append(("error", "; ".join(f"{k}: {', '.join(v)}" for k, v in form.errors.items())))
    else:
        skill = form.cleaned_data["skill"] or None
        try:
            outcome = services.request_answer(
                request=approval,
                user=request.user,
                answer=form.cleaned_data["answer"],
                skills=[skill] if skill else None,
                # A tool request's pattern (U3): "" the whole tool; not sent, the narrowest.
                pattern=form.cleaned_data["pattern"] if "pattern" in request.POST else None,
            )
        except services.NotAllowedError as exc:
            notes.append(("error", str(exc)))
            if not request.htmx:  # a forged or stale POST: refused, saying what to do instead
                fresh = _visible_request(request, pk)
                return render(
                    request, "approvals/request.html", _request_page(request, fresh, notes=notes), status=403
                )
        except services.ApprovalError as exc:
            notes.append(("error", str(exc)))
        else:
            notes.extend(_outcome_notes(outcome))
    if request.htmx:
        # The request as the answer left it, when the service knows all of it (it closed it
        # with every answer in hand); else read again, with whatever others answered meanwhile.
        fresh = outcome.request if outcome and outcome.request else _visible_request(request, pk)
        card = _card(request, fresh)
        # Swapped into the request's own page: its title still links nowhere.
        page = reverse("approvals:request", args=[fresh.pk])
        card["on_page"] = request.headers.get("HX-Current-URL", "").split("?")[0].endswith(page)
        return render(request, "approvals/_card.html", {"card": card, "notes": notes, "swapped": True})
    for level, text in notes:
        messages.add_message(request, messages.ERROR if level == "error" else messages.SUCCESS, text)
    return redirect("approvals:inbox")


def _outcome_notes(outcome: services.AnswerOutcome) -> list[tuple[str, str]]:
    notes = [("info", text) for text in outcome.notes]
    if outcome.written:
        notes.append(("success", ANSWERED_MESSAGE.format(skills=", ".join(i.skill for i in outcome.written))))
    for skill, given, needed in outcome.allows_recorded:
        notes.append(("success", ALLOW_RECORDED_MESSAGE.format(skill=skill, given=given, needed=needed)))
    for item in outcome.already_answered:
        who = item.answered_by.username if item.answered_by else f"the {item.source.lower() or 'chain'}"
        how = answer_label(item.decision, item.scope)
        notes.append(("info", ALREADY_ANSWERED_MESSAGE.format(skill=item.skill, who=who, how=how)))
    for skill, why in outcome.failed:
        notes.append(("error", FAILED_MESSAGE.format(skill=skill, why=why)))
    return notes


@require_http_methods(["GET", "POST"])
@approver_or_operator
def request_dismiss_view(request: HttpRequest, pk: Any) -> HttpResponse:
    approval = _visible_request(request, pk)
    if request.method == "POST":
        try:
            services.request_cancel(
                request=approval, actor=Actor.for_user(request.user), why="dismissed by a person"
            )
        except services.RequestClosedError as exc:
            messages.info(request, str(exc))
        else:
            messages.success(request, DISMISSED_MESSAGE)
        return redirect("approvals:inbox")
    open_skills = [i.skill for i in approval.items.all() if not i.answered]
    shape = request_shape(approval)
    if approval.kind == RequestKind.TOOL:
        denied = tool_rule_grammar.rule_text(
            server=approval.server, tool=approval.tool, pattern=tool_answers.abort_pattern(approval.subject)
        )
        effect = (
            f"The call is denied for this session, as {denied} (never agent-wide), and the request is closed."
        )
        open_skills = [denied] if open_skills else []
    elif shape.escalates:
        effect = (
            "The request is closed and the runtime refuses each skill not yet answered. This "
            "request has no session, so nothing is stored: the next run asks again."
        )
    else:
        effect = (
            "Each skill not yet answered is denied for this session (never agent-wide), and the "
            "request is closed."
        )
    answered = [i.skill for i in approval.items.all() if i.answered]
    context = {
        "title": "Deny the rest of this request?",
        "effect": effect,
        "items": open_skills,
        "kept": f"Answers already given stay as they are: {', '.join(answered)}." if answered else "",
        "confirm_label": "Deny the rest",
        "cancel_url": "approvals:inbox",
        "danger": True,
    }
    return render(request, "approvals/confirm.html", context)
