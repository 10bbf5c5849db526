"""The tool list (filters, keyset pages), the tool page, accepting a changed definition, review findings."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import push_url

from aimon_admin.core.prg import form_from_draft, redirect_invalid
from aimon_admin.core.words import in_words
from aimon_admin.registry import policy, selectors, services
from aimon_admin.registry.choices import IdempotencyBehavior, SideEffectLevel
from aimon_admin.registry.forms import (
    ReviewForm,
    ToolFilterForm,
    ToolSubjectForm,
)
from aimon_admin.registry.models import Tool
from aimon_admin.registry.views._common import (
    AXES,
    AxisChange,
    actor_of,
    is_htmx,
    redirect_after_write,
    render_page,
)
from aimon_admin.registry.views.findings import RELAY_RULE, finding_views, relay_findings_context

# Messages users see (tests import these).
DEFINITION_ACCEPTED = "New definition of {tool} accepted; its axes are resolved from it now."
REVIEW_RECORDED = "Finding recorded for {tool}."
SUBJECT_SET = "Subject argument of {tool} set to {argument}."
SUBJECT_CLEARED = "{tool} has no subject argument now: only rules and approvals for the whole tool apply."
SUBJECT_DRAFT = "tool-subject"
# U6, in the words the tool pages use.
REPLAY_REASKS = (
    "Not idempotent: a replayed call (a retry, a rewake) asks again, even when the first call was "
    "approved with Allow this call."
)
REPLAY_REUSES = "Idempotent: a replayed call may reuse the Allow this call its first call was given."
# How a stored explanation names the trust it was resolved under (registry.policy.resolve).
TRUST_IN_EXPLANATIONS = {
    "trust IGNORE:": "the server's claims are ignored:",
    "trust TRUST:": "the server's claims are trusted:",
}
TOOL_PAGE_SIZE = 50


# The list's columns: no JSON column is read for a list row.
_LIST_FIELDS = (
    "id",
    "name",
    "source",
    "side_effect_level",
    "destructive_behavior",
    "idempotency_behavior",
    "awaiting_review",
    "accepted_fingerprint",
    "present",
    "review_finding",
    "server__name",
    "runtime__name",
)


def _filtered_tools(data: dict[str, Any]) -> QuerySet[Tool]:
    """Every tool, local and MCP, narrowed by each filter given (AND), in (name, id) order."""
    tools = Tool.objects.select_related("server", "runtime").only(*_LIST_FIELDS)
    exact = {
        "source": "source",
        "server": "server",
        "runtime": "runtime",
        "level": "side_effect_level",
        "destructive": "destructive_behavior",
        "idempotency": "idempotency_behavior",
    }
    for key, field in exact.items():
        if data.get(key):
            tools = tools.filter(**{field: data[key]})
    if data.get("name"):
        tools = tools.filter(name__icontains=data["name"])
    if data.get("awaiting"):
        tools = tools.filter(awaiting_review=True)
    if data.get("absent"):
        tools = tools.filter(present=False)
    return tools.order_by("name", "id")


def _filter_query(data: dict[str, Any]) -> dict[str, str]:
    """The filters in force as URL parameters (blank ones left out)."""
    query: dict[str, str] = {}
    for key in ToolFilterForm.FILTERS:
        value = data.get(key)
        if value in (None, "", False):
            continue
        query[key] = "on" if value is True else getattr(value, "name", None) or str(value)
    return query


@require_GET
@login_required
@permission_required("registry.view_tool", raise_exception=True)
def tool_list_view(request: HttpRequest) -> HttpResponse:
    form = ToolFilterForm(request.GET)
    form.is_valid()  # invalid filters are shown with their error and left out; the rest apply
    data = form.cleaned_data
    tools = _filtered_tools(data)
    after_name, after_id = data.get("after_name"), data.get("after_id")
    paged = after_id is not None and bool(after_name)
    if paged:
        # Keyset pagination: the rows after the last (name, id) shown; no OFFSET, no COUNT.
        # name >= … is the range the (name, id) index scans; the OR only trims its start.
        tools = tools.filter(Q(name__gte=after_name), Q(name__gt=after_name) | Q(id__gt=after_id))
    rows = list(tools[: TOOL_PAGE_SIZE + 1])
    has_next = len(rows) > TOOL_PAGE_SIZE
    rows = rows[:TOOL_PAGE_SIZE]
    query = _filter_query(data)
    base = reverse("registry:tool-list")
    context = {
        "form": form,
        "tools": rows,
        "tools_url": base,
        "servers_url": reverse("registry:server-list"),
        "runtimes_url": reverse("runtimes:list"),
        "paged": paged,
        "filtered": bool(query),
        "first_url": f"{base}?{urlencode(query)}" if query else base,
        "next_url": (
            f"{base}?{urlencode({**query, 'after_name': rows[-1].name, 'after_id': rows[-1].pk})}"
            if has_next
            else ""
        ),
    }
    context.update(relay_findings_context(request))
    response = render_page(request, "registry/tool_list.html", context, "results")
    if is_htmx(request):
        # The address bar gets the canonical query (no blank filters), not the raw form.
        canonical = {**query, **({"after_name": after_name, "after_id": after_id} if paged else {})}
        push_url(response, f"{base}?{urlencode(canonical)}" if canonical else base)
    return response


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr)


def _tool(pk: int) -> Tool:
    return get_object_or_404(Tool.objects.select_related("server", "runtime", "reviewed_by"), pk=pk)


def _schema_arguments(schema: Any) -> list[str]:
    """The argument names a tool's input schema declares, text ones first: the suggestions
    for its subject argument."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return []
    names = [name for name in properties if isinstance(name, str)]

    def is_text(name: str) -> bool:
        spec = properties[name]
        return isinstance(spec, dict) and spec.get("type") == "string"

    return sorted(names, key=lambda name: (not is_text(name), name))[:50]


def _subject_context(request: HttpRequest, tool: Tool, form: ToolSubjectForm | None = None) -> dict[str, Any]:
    server = tool.server.name if tool.server_id is not None else ""
    current = selectors.subject_argument_for(server, tool.name)
    choices = _schema_arguments(tool.input_schema)
    if form is None:
        form = form_from_draft(request, SUBJECT_DRAFT, lambda data: ToolSubjectForm(data, choices=choices))
        if not form.is_bound:
            initial = {"argument": current.argument, "kind": current.kind if current.argument else ""}
            form = ToolSubjectForm(initial=initial, choices=choices)
    return {
        "subject_argument": current.argument,
        "subject_kind": current.kind.label if current.argument else "",
        "subject_kind_value": current.kind.value if current.argument else "",
        "subject_form": form,
        "can_set_subject": request.user.has_perm("registry.change_tool"),
        "replay_words": REPLAY_REASKS
        if tool.idempotency_behavior == IdempotencyBehavior.NON_IDEMPOTENT
        else REPLAY_REUSES,
    }


def explanation_words(stored: str) -> dict[str, str]:
    """An axis's stored explanation ("trust IGNORE: claims not used → MUTATING") as the page
    says it ("the server's claims are ignored: claims not used → writes"), and as stored, for
    its title: the resolution wrote it with codes, and rows keep what they were given."""
    text = stored
    for code, words in TRUST_IN_EXPLANATIONS.items():
        text = text.replace(code, words)
    return {"stored": stored, "words": in_words(text, "level")}


def _tool_context(request: HttpRequest, tool: Tool) -> dict[str, Any]:
    explanations = tool.explanations or {}
    context: dict[str, Any] = {
        "tool": tool,
        "axes": [
            (label, getattr(tool, key), explanation_words(explanations.get(key, ""))) for key, label in AXES
        ],
        "claims_json": _pretty(tool.claims),
        "schema_json": _pretty(tool.input_schema),
        "can_accept": tool.awaiting_review
        and tool.server_id is not None
        and request.user.has_perm("registry.change_tool"),
        "can_review": request.user.has_perm("registry.change_tool")
        and tool.side_effect_level == SideEffectLevel.MUTATING,
        **_subject_context(request, tool),
    }
    if tool.server_id is not None:
        context.update(
            tool_findings=finding_views(selectors.relay_findings_for_tool(tool=tool)),
            can_decide_findings=request.user.has_perm("registry.change_tool"),
            relay_rule=RELAY_RULE,
        )
    if tool.awaiting_review and tool.server is not None:
        # What accepting would resolve to, straight from the policy (T11, T15).
        resolution = policy.resolve(tool.claims, tool.server.annotation_trust)
        context.update(
            accepted_json=_pretty(tool.accepted_claims),
            lowered=policy.claims_lowered_risk(tool.accepted_claims, tool.claims),
            after_accept=[
                AxisChange(label, getattr(tool, key), value)
                for (key, label), value in zip(
                    AXES,
                    (resolution.axes.level, resolution.axes.destructive, resolution.axes.idempotency),
                    strict=True,
                )
            ],
        )
    return context


@require_GET
@login_required
@permission_required("registry.view_tool", raise_exception=True)
def tool_detail_view(request: HttpRequest, pk: int) -> HttpResponse:
    tool = _tool(pk)
    partial = "review" if tool.awaiting_review else None
    return render_page(request, "registry/tool_detail.html", _tool_context(request, tool), partial)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("registry.change_tool", raise_exception=True)
def tool_accept_view(request: HttpRequest, pk: int) -> HttpResponse:
    """T15: confirm, then accept a changed definition that claims less risk."""
    tool = _tool(pk)
    if request.method == "POST":
        try:
            services.tool_accept_definition(tool=tool, actor=actor_of(request))
        except services.RegistryError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, DEFINITION_ACCEPTED.format(tool=tool))
        return redirect_after_write(request, reverse("registry:tool-detail", args=[tool.pk]))
    return render_page(request, "registry/tool_accept.html", _tool_context(request, tool), "confirm")


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("registry.change_tool", raise_exception=True)
def tool_review_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Record an operator's finding on a MUTATING tool still at DESTRUCTIVE (T2)."""
    tool = _tool(pk)
    draft = f"tool-review:{tool.pk}"

    def make(data: Any) -> ReviewForm:
        return ReviewForm(data, auto_id=f"id_review_{tool.pk}_%s")

    # After an invalid POST (post/redirect/get), the form as typed and its errors.
    form = make(request.POST) if request.method == "POST" else form_from_draft(request, draft, make)
    return_to = request.POST.get("return_to") or request.GET.get("return_to") or ""
    if not url_has_allowed_host_and_scheme(return_to, allowed_hosts={request.get_host()}):
        return_to = ""
    recorded = False
    if request.method == "POST" and form.is_valid():
        try:
            tool = services.tool_record_review(
                tool=tool,
                finding=form.cleaned_data["finding"],
                note=form.cleaned_data["note"],
                actor=actor_of(request),
            )
        except services.RegistryError as exc:
            form.add_error(None, str(exc))
        else:
            recorded = True
            if not is_htmx(request):
                messages.success(request, REVIEW_RECORDED.format(tool=tool))
                return redirect(return_to or reverse("registry:tool-detail", args=[tool.pk]))
    if request.method == "POST" and not recorded and not is_htmx(request):
        here = reverse("registry:tool-review", args=[tool.pk])
        to = f"{here}?{urlencode({'return_to': return_to})}" if return_to else here
        return redirect_invalid(request, form, name=draft, to=to)
    item = {"tool": tool, "form": form, "recorded": recorded}
    context = {"item": item, "tool": tool, "return_to": return_to, "can_review": True}
    return render_page(request, "registry/review.html", context, "row")


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("registry.change_tool", raise_exception=True)
def tool_subject_view(request: HttpRequest, pk: int) -> HttpResponse:
    """U1: name or clear the tool's subject argument; shared by every registration of the
    tool (a runtime's own tool: every runtime's tool of that name)."""
    tool = _tool(pk)
    page = reverse("registry:tool-detail", args=[tool.pk])
    if request.method == "GET":
        # A reload of an invalid form's page, or a typed address: the form lives on the tool page.
        return redirect(page + "#tool-subject")
    choices = _schema_arguments(tool.input_schema)
    form = ToolSubjectForm(request.POST, choices=choices)
    if form.is_valid():
        argument = form.cleaned_data["argument"].strip()
        try:
            services.tool_subject_set(
                server=tool.server.name if tool.server_id is not None else "",
                tool=tool.name,
                argument=argument,
                kind=form.cleaned_data["kind"] or None,
                actor=actor_of(request),
            )
        except ValidationError as exc:
            for errors in exc.message_dict.values():
                for error in errors:
                    form.add_error("argument", error)
        else:
            if argument:
                messages.success(request, SUBJECT_SET.format(tool=tool.name, argument=argument))
            else:
                messages.success(request, SUBJECT_CLEARED.format(tool=tool.name))
            return redirect(page + "#tool-subject")
    return redirect_invalid(request, form, name=SUBJECT_DRAFT, to=page, anchor="tool-subject")
