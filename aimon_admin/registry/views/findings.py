"""Relay findings (T15): what a runtime relayed differently from the served definition, or
of a tool no runtime is served. Operators accept one (it becomes the definition every
runtime is served) or dismiss it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from aimon_admin.registry import policy, selectors, services
from aimon_admin.registry.choices import RelayFindingStatus
from aimon_admin.registry.models import RelayFinding
from aimon_admin.registry.views._common import AXES, AxisChange, actor_of, redirect_after_write, render_page

# Messages users see (tests import these).
FINDING_ACCEPTED = "The definition {runtime} relayed is now the one every runtime is served for {tool}."
FINDING_ACCEPTED_HELD = (
    "The definition {runtime} relayed is now the one every runtime is served for {tool}. It claims "
    "less risk, so the server's claims are ignored for the tool until you also accept that on the "
    "tool's page."
)
FINDING_DISMISSED = "Relay finding from {runtime} on {tool} dismissed; the served definition is unchanged."
RELAY_RULE = (
    "A runtime's relayed listing is that runtime's word only: it never lowers a tool's risk, never "
    "clears a hold and never changes the description or input schema other runtimes are served; "
    "only a claim of more risk takes effect at once. Nor does it serve a tool to anyone: a tool the "
    "server's own sync has not listed, or no longer lists, stays unserved. What it relays "
    "differently, or of a tool no runtime is served, is kept here as a finding, attributed to the "
    "runtime, until an operator accepts or dismisses it."
)
# T15: why a finding's tool is served to no runtime (only the server's own sync lists tools).
NOT_SERVED_NEVER_LISTED = "Served to no runtime: the server's own sync has never listed this tool."
NOT_SERVED_NO_LONGER_LISTED = "Served to no runtime: the server's own sync no longer lists this tool."
FINDINGS_SHOWN = 20


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr)


@dataclass(frozen=True)
class FindingView:
    """A finding as the pages show it: what differs, and the relayed text pretty-printed."""

    finding: RelayFinding
    differs: list[str]

    @property
    def description_text(self) -> str:
        value = self.finding.description
        return value if isinstance(value, str) else _pretty(value)

    @property
    def schema_json(self) -> str:
        return _pretty(self.finding.input_schema)

    @property
    def annotations_json(self) -> str:
        return _pretty(self.finding.annotations)

    @property
    def open(self) -> bool:
        return self.finding.status == RelayFindingStatus.OPEN

    @property
    def unserved(self) -> str:
        """Why the finding's tool is served to no runtime; empty when it is served."""
        tool = self.finding.tool
        if tool.relayed_only:
            return NOT_SERVED_NEVER_LISTED
        return "" if tool.present else NOT_SERVED_NO_LONGER_LISTED


def finding_views(findings: Any) -> list[FindingView]:
    rows = []
    for finding in findings:
        tool = finding.tool
        differs = policy.definition_differences(
            (tool.description, tool.input_schema, tool.claims),
            (finding.description, finding.input_schema, finding.annotations),
        )
        rows.append(FindingView(finding, differs))
    return rows


def relay_findings_context(request: HttpRequest) -> dict[str, Any]:
    """The open relay findings for the tools page and the worklist (newest first); nothing for
    an htmx request, which gets the page's results partial only."""
    htmx = getattr(request, "htmx", None)
    if htmx and not htmx.history_restore_request:
        return {}
    findings = list(selectors.relay_findings_open()[: FINDINGS_SHOWN + 1])
    return {
        "relay_findings": finding_views(findings[:FINDINGS_SHOWN]),
        "relay_findings_more": len(findings) > FINDINGS_SHOWN,
        "can_decide_findings": request.user.has_perm("registry.change_tool"),
        "relay_rule": RELAY_RULE,
    }


def _finding(pk: int) -> RelayFinding:
    return get_object_or_404(RelayFinding.objects.select_related("tool__server", "runtime"), pk=pk)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("registry.change_tool", raise_exception=True)
def finding_accept_view(request: HttpRequest, pk: int) -> HttpResponse:
    """T15: confirm, then make a relayed definition the one every runtime is served."""
    finding = _finding(pk)
    tool = finding.tool
    if request.method == "POST":
        try:
            services.relay_finding_accept(finding=finding, actor=actor_of(request))
        except services.RegistryError as exc:
            messages.error(request, str(exc))
        else:
            tool.refresh_from_db()
            message = FINDING_ACCEPTED_HELD if tool.awaiting_review else FINDING_ACCEPTED
            messages.success(request, message.format(runtime=finding.runtime.name, tool=tool))
        return redirect_after_write(request, reverse("registry:tool-detail", args=[tool.pk]))
    lowered = selectors.relay_finding_lowers(finding)
    resolution = policy.resolve(
        finding.annotations, tool.server.annotation_trust, held_for_review=bool(lowered)
    )
    context = {
        "tool": tool,
        "item": finding_views([finding])[0],
        "lowered": lowered,
        "relay_rule": RELAY_RULE,
        "after_accept": [
            AxisChange(label, getattr(tool, key), value)
            for (key, label), value in zip(
                AXES,
                (resolution.axes.level, resolution.axes.destructive, resolution.axes.idempotency),
                strict=True,
            )
        ],
    }
    return render_page(request, "registry/finding_accept.html", context, "confirm")


@require_POST
@login_required
@permission_required("registry.change_tool", raise_exception=True)
def finding_dismiss_view(request: HttpRequest, pk: int) -> HttpResponse:
    """T15: dismiss a relayed definition; the served one stays as it is."""
    finding = _finding(pk)
    try:
        services.relay_finding_dismiss(finding=finding, actor=actor_of(request))
    except services.RegistryError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, FINDING_DISMISSED.format(runtime=finding.runtime.name, tool=finding.tool))
    return redirect_after_write(request, reverse("registry:tool-detail", args=[finding.tool.pk]))
