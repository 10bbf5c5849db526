"""The menu: the navigation each person sees, grouped by job, from the permissions their
role grants, and the context processor that puts it on every page (settings TEMPLATES).

It names every app's pages, so it sits at the project level above the domain apps, which
never import it (tests/test_layers.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from django.urls import reverse


@dataclass(frozen=True)
class NavItem:
    label: str
    url_name: str
    permission: str | None  # None: everyone signed in

    @property
    def url(self) -> str:
        return reverse(self.url_name)


@dataclass(frozen=True)
class NavGroup:
    label: str
    items: tuple[NavItem, ...]


HOME = NavItem("Home", "core:home", None)
# By job: answering requests; what exists (runtimes, tools, servers); what is allowed;
# what happened; who may do it. A group none of whose pages a role may open is not shown.
NAV_GROUPS: tuple[NavGroup, ...] = (
    NavGroup(
        "Approvals",
        (
            NavItem("Inbox", "approvals:inbox", "approvals.answer_approvalrequest"),
            NavItem("Sessions", "approvals:sessions", "approvals.answer_approvalrequest"),
            NavItem("My notifications", "notifications:channels", "approvals.answer_approvalrequest"),
        ),
    ),
    NavGroup(
        "Registry",
        (
            NavItem("Runtimes", "runtimes:list", "runtimes.view_agentruntime"),
            NavItem("Tools", "registry:tool-list", "registry.view_tool"),
            NavItem("MCP servers", "registry:server-list", "registry.view_mcpserver"),
            NavItem("Tools to review", "registry:worklist", "registry.view_tool"),
        ),
    ),
    NavGroup(
        "Policy",
        (
            NavItem("Rules", "approvals:rules", "approvals.view_skillrule"),
            NavItem("Gate simulator", "registry:simulator", "registry.view_tool"),
        ),
    ),
    NavGroup(
        "Audit",
        (
            NavItem("Audit log", "audit:home", "audit.view_auditevent"),
            NavItem("Delivery log", "notifications:log", "notifications.view_delivery"),
        ),
    ),
    NavGroup(
        "Administration",
        (
            NavItem("People", "accounts:people", "accounts.view_user"),
            NavItem("Locked sign-ins", "accounts:locked", "accounts.change_user"),
            NavItem("Webhooks", "notifications:webhooks", "notifications.change_channel"),
        ),
    ),
    # One item: the operator's sidebar fits 800 px high; the help pages link the API docs.
    NavGroup("Help", (NavItem("Documentation", "core:help", None),)),
)


def navigation(request: HttpRequest) -> dict[str, object]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_groups": []}
    visible = [
        (group, [item for item in group.items if item.permission is None or user.has_perm(item.permission)])
        for group in NAV_GROUPS
    ]
    visible = [(group, items) for group, items in visible if items]
    current = _current_url(request.path, [HOME, *(item for _, items in visible for item in items)])

    def entry(item: NavItem) -> dict[str, Any]:
        return {"label": item.label, "url": item.url, "current": item.url == current}

    return {
        "nav_home": entry(HOME),
        "nav_groups": [
            {"label": group.label, "items": [entry(item) for item in items]} for group, items in visible
        ],
    }


def _current_url(path: str, items: list[NavItem]) -> str | None:
    """The one item a page belongs to: the longest address the path starts with (Home only
    for itself), so /approvals/rules/ is Skill rules, not the inbox at /approvals/ too."""
    best = None
    for item in items:
        url = item.url
        matches = path == url if url == "/" else path.startswith(url)
        if matches and (best is None or len(url) > len(best)):
            best = url
    return best
