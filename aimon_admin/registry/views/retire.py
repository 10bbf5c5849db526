"""Retiring an MCP server: a confirmation page, then the POST and a redirect back."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from aimon_admin.registry import services
from aimon_admin.registry.models import McpServer
from aimon_admin.registry.views._common import actor_of

SERVER_RETIRED = "{name} is retired: its tools are offered to no runtime and its stored secrets are erased."


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("registry.change_mcpserver", raise_exception=True)
def server_retire_view(request: HttpRequest, name: str) -> HttpResponse:
    server = get_object_or_404(McpServer, name=name)
    back = reverse("registry:server-detail", args=[server.name])
    if request.method == "POST":
        try:
            services.mcp_server_retire(server=server, actor=actor_of(request))
        except services.RegistryError as exc:
            messages.info(request, str(exc))
        else:
            messages.success(request, SERVER_RETIRED.format(name=server.name))
        return redirect(back)
    secrets = sorted((server.env or {}).keys()) + sorted((server.headers or {}).keys())
    return render(
        request,
        "core/confirm.html",
        {
            "title": f"Retire {server.name}?",
            "effect": (
                f"{server.name} is disabled for good: its tools are offered to no runtime, it is "
                "never synced again, and its settings can no longer change. The secrets stored for "
                "it are erased. Its tools, their history and the audit log stay, and so does its "
                "name (a configuration file naming it is refused). This cannot be undone: to "
                "pause it instead, untick Enabled in its settings."
            ),
            "items": [f"The value of {secret} is erased" for secret in secrets],
            "refusal": services.MCP_SERVER_RETIRED_MESSAGE if server.is_retired else None,
            "confirm_label": "Retire for good",
            "danger": True,
            "cancel_href": back,
            "crumbs": [(reverse("registry:server-list"), "MCP servers"), (back, server.name)],
        },
    )
