"""MCP server pages: list, create, edit, the server page with its sync progress, and the trust switch."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import ValidationError
from django.db.models import Count, OuterRef, Q, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from aimon_admin.core.prg import form_from_draft, redirect_invalid
from aimon_admin.registry import services
from aimon_admin.registry.choices import AnnotationTrust
from aimon_admin.registry.forms import (
    McpServerForm,
    TrustForm,
)
from aimon_admin.registry.models import McpServer, McpSyncRun, Tool
from aimon_admin.registry.sync import run_trouble
from aimon_admin.registry.views._common import (
    AXES,
    AxisChange,
    actor_of,
    error_text,
    is_htmx,
    redirect_after_write,
    render_page,
)

# Messages users see (tests import these).
SERVER_CREATED = "MCP server {name} created. Sync it to fetch its tools."
SERVER_SAVED = "Settings saved."
SERVER_UNCHANGED = "Nothing changed."
SYNC_QUEUED = "Sync of {name} queued."
TRUST_CHANGED = "Annotation trust of {name} is now “{trust}”: {changed} of its tools changed axes."
TRUST_UNCHANGED = "Annotation trust of {name} was already “{trust}”; nothing changed."
TRUST_PREVIEW_STALE = (
    "The server's tools changed since this list was made. Check the new list and confirm again."
)
TRUST_MEANS = (
    "While the server's claims are trusted they decide each tool's axes: readOnlyHint says whether "
    "it writes, destructiveHint and idempotentHint the traits, and a read-only tool is never "
    "destructive. A later definition that claims less risk still waits for an operator's review "
    "before it takes effect; one that claims more risk takes effect at once."
)
IGNORE_MEANS = (
    "While the server's claims are ignored they are stored and shown but not used: every tool "
    "counts as writing, destructive and not idempotent whatever it claims, so every call asks, and "
    "is denied when nobody can be asked."
)
SERVER_TOOLS_SHOWN = 200
SYNC_ATTENTION = "attention"
BAD_FILTER_TITLE = "This filter cannot be read"
BAD_SYNC_FILTER = "Sync: {value!r} is not a choice here: leave it out for every server, or use attention."


# --- Reads (registry-wide; every signed-in user with the view permission sees the same) ----------


def _server(name: str) -> McpServer:
    return get_object_or_404(McpServer, name=name)


def _server_list() -> list[McpServer]:
    """Servers with their tool counts and their latest sync run (two queries)."""
    latest = McpSyncRun.objects.filter(server=OuterRef("pk")).order_by("-created_at", "-id")
    servers = list(
        McpServer.objects.annotate(
            tools_present=Count("tools", filter=Q(tools__present=True)),
            tools_absent=Count("tools", filter=Q(tools__present=False) & ~Q(tools__accepted_fingerprint="")),
            tools_relayed_only=Count("tools", filter=Q(tools__accepted_fingerprint="")),
            tools_awaiting=Count("tools", filter=Q(tools__present=True, tools__awaiting_review=True)),
            last_run_id=Subquery(latest.values("pk")[:1]),
        ).order_by("name")
    )
    runs = McpSyncRun.objects.in_bulk([s.last_run_id for s in servers if s.last_run_id])
    for server in servers:
        server.last_run = runs.get(server.last_run_id)
    return servers


def _latest_run(server: McpServer) -> McpSyncRun | None:
    return server.sync_runs.order_by("-created_at", "-id").first()


def _server_tools(server: McpServer) -> tuple[list[Tool], bool]:
    tools = list(server.tools.order_by("name", "id")[: SERVER_TOOLS_SHOWN + 1])
    return tools[:SERVER_TOOLS_SHOWN], len(tools) > SERVER_TOOLS_SHOWN


# --- MCP servers ----------------------------------------------------------------------------


@require_GET
@login_required
@permission_required("registry.view_mcpserver", raise_exception=True)
def server_list_view(request: HttpRequest) -> HttpResponse:
    servers = _server_list()
    # ?sync=attention: the enabled servers whose latest sync failed or is stuck (the home's count).
    sync_filter = request.GET.get("sync", "")
    if sync_filter and sync_filter != SYNC_ATTENTION:
        message = BAD_SYNC_FILTER.format(value=sync_filter)
        context = {"status": 400, "title": BAD_FILTER_TITLE, "message": message}
        return render(request, "core/error.html", context, status=400)
    if sync_filter:
        now = timezone.now()
        servers = [s for s in servers if s.enabled and run_trouble(s.last_run, now=now)]
    context = {
        "servers": servers,
        "any_sync_active": any(s.last_run and s.last_run.active for s in servers),
        "sync_filter": sync_filter,
    }
    return render_page(request, "registry/server_list.html", context, "servers")


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("registry.add_mcpserver", raise_exception=True)
def server_create_view(request: HttpRequest) -> HttpResponse:
    # After an invalid POST without htmx (post/redirect/get), the form as typed and its errors.
    form = (
        McpServerForm(request.POST)
        if request.method == "POST"
        else form_from_draft(request, "server-create", McpServerForm)
    )
    if request.method == "POST" and form.is_valid():
        try:
            server = services.mcp_server_create(
                name=form.cleaned_data["name"], actor=actor_of(request), **form.service_fields()
            )
        except (services.RegistryError, ValidationError) as exc:
            form.add_error(None, error_text(exc))
        else:
            messages.success(request, SERVER_CREATED.format(name=server.name))
            return redirect_after_write(request, reverse("registry:server-detail", args=[server.name]))
    if request.method == "POST" and not is_htmx(request):
        return redirect_invalid(request, form, name="server-create", to=reverse("registry:server-create"))
    # An invalid form re-renders with 200: htmx 2 does not swap 4xx responses.
    return render_page(request, "registry/server_form.html", {"form": form, "server": None}, "form")


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("registry.change_mcpserver", raise_exception=True)
def server_edit_view(request: HttpRequest, name: str) -> HttpResponse:
    server = _server(name)
    if server.is_retired:
        messages.error(request, services.MCP_SERVER_RETIRED_MESSAGE)
        return redirect("registry:server-detail", name=server.name)
    draft = f"server-edit:{server.pk}"

    def make(data: Any) -> McpServerForm:
        return McpServerForm(data, server=server)

    form = make(request.POST) if request.method == "POST" else form_from_draft(request, draft, make)
    if request.method == "POST" and form.is_valid():
        try:
            changed = services.mcp_server_update(
                server=server, actor=actor_of(request), **form.service_fields()
            )
        except (services.RegistryError, ValidationError) as exc:
            form.add_error(None, error_text(exc))
        else:
            messages.success(request, SERVER_SAVED if changed else SERVER_UNCHANGED)
            return redirect_after_write(request, reverse("registry:server-detail", args=[server.name]))
    if request.method == "POST" and not is_htmx(request):
        return redirect_invalid(
            request, form, name=draft, to=reverse("registry:server-edit", args=[server.name])
        )
    return render_page(request, "registry/server_form.html", {"form": form, "server": server}, "form")


def _server_context(request: HttpRequest, server: McpServer, **extra: Any) -> dict[str, Any]:
    tools, more = _server_tools(server)
    context: dict[str, Any] = {
        "server": server,
        "run": _latest_run(server),
        "recent_runs": list(
            server.sync_runs.select_related("requested_by").order_by("-created_at", "-id")[:5]
        ),
        "tools": tools,
        "more_tools": more,
        "env_names": sorted((server.env or {}).keys()),
        "header_names": sorted((server.headers or {}).keys()),
        "other_trust": _other_trust(server),
        "trust_means": TRUST_MEANS if server.annotation_trust == AnnotationTrust.TRUST else IGNORE_MEANS,
        # A retired server is frozen: no edit, trust switch or sync.
        "can_change": request.user.has_perm("registry.change_mcpserver") and not server.is_retired,
    }
    context.update(extra)
    return context


def _other_trust(server: McpServer) -> AnnotationTrust:
    if server.annotation_trust == AnnotationTrust.TRUST:
        return AnnotationTrust.IGNORE
    return AnnotationTrust.TRUST


@require_GET
@login_required
@permission_required("registry.view_mcpserver", raise_exception=True)
def server_detail_view(request: HttpRequest, name: str) -> HttpResponse:
    server = _server(name)
    return render_page(request, "registry/server_detail.html", _server_context(request, server))


def _sync_fragment(request: HttpRequest, server: McpServer, **extra: Any) -> HttpResponse:
    """The sync section; once its run has finished, the server's tools too (out of band)."""
    context = _server_context(request, server, **extra)
    html = render_to_string("registry/server_detail.html#sync", context, request=request)
    run = context["run"]
    if run is not None and not run.active:
        html += render_to_string(
            "registry/server_detail.html#tools", {**context, "oob": True}, request=request
        )
    return HttpResponse(html)


@require_POST
@login_required
@permission_required("registry.change_mcpserver", raise_exception=True)
def server_sync_view(request: HttpRequest, name: str) -> HttpResponse:
    server = _server(name)
    try:
        services.mcp_sync_request(server=server, actor=actor_of(request))
    except services.RegistryError as exc:
        if is_htmx(request):
            return _sync_fragment(request, server, sync_error=str(exc))
        messages.error(request, str(exc))
    else:
        if is_htmx(request):
            return _sync_fragment(request, server)
        messages.success(request, SYNC_QUEUED.format(name=server.name))
    return redirect("registry:server-detail", name=server.name)


@require_GET
@login_required
@permission_required("registry.view_mcpserver", raise_exception=True)
def server_sync_run_view(request: HttpRequest, name: str, run_id: int) -> HttpResponse:
    """What the sync section polls every second while its run is queued or running."""
    server = _server(name)
    get_object_or_404(McpSyncRun, pk=run_id, server=server)
    if is_htmx(request):
        return _sync_fragment(request, server)
    return redirect("registry:server-detail", name=server.name)


def _preview_rows(server: McpServer, changes: list[services.TrustChange]) -> list[dict[str, Any]]:
    absent = set(server.tools.filter(present=False).values_list("name", flat=True))
    return [
        {
            "tool": c.tool,
            "absent": c.tool in absent,
            "axes": [AxisChange(label, c.before[key], c.after[key]) for key, label in AXES],
        }
        for c in changes
    ]


def _preview_digest(changes: list[services.TrustChange]) -> str:
    """Names what the operator saw, so a confirmation of a list that has since changed is refused."""
    payload = json.dumps([[c.tool, c.before, c.after] for c in changes], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("registry.change_mcpserver", raise_exception=True)
def server_trust_view(request: HttpRequest, name: str) -> HttpResponse:
    """T13: show exactly what switching trust would change; switch only once confirmed."""
    server = _server(name)
    if server.is_retired:
        messages.error(request, services.MCP_SERVER_RETIRED_MESSAGE)
        return redirect("registry:server-detail", name=server.name)
    trust = _other_trust(server)
    if request.method == "POST":
        form = TrustForm(request.POST)
        if form.is_valid():
            trust = AnnotationTrust(form.cleaned_data["trust"])
            preview = services.trust_change_preview(server=server, trust=trust)
            already = server.annotation_trust == trust
            if already or form.cleaned_data["preview"] == _preview_digest(preview):
                changes = services.mcp_server_set_trust(server=server, trust=trust, actor=actor_of(request))
                if already:
                    messages.info(request, TRUST_UNCHANGED.format(name=server.name, trust=trust.label))
                else:
                    messages.success(
                        request,
                        TRUST_CHANGED.format(name=server.name, trust=trust.label, changed=len(changes)),
                    )
                return redirect_after_write(request, reverse("registry:server-detail", args=[server.name]))
        # Post/redirect/get: the page again, with the list as it is now, to confirm again.
        messages.error(request, TRUST_PREVIEW_STALE)
        return redirect_after_write(request, reverse("registry:server-trust", args=[server.name]))
    changes = services.trust_change_preview(server=server, trust=trust)
    context = {
        "server": server,
        "trust": trust,
        "trust_means": TRUST_MEANS if trust == AnnotationTrust.TRUST else IGNORE_MEANS,
        "rows": _preview_rows(server, changes),
        "unchanged": server.tools.count() - len(changes),
        "digest": _preview_digest(changes),
    }
    return render_page(request, "registry/server_trust.html", context, "confirm")
