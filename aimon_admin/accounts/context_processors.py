"""The navigation each person sees, from the permissions their role grants."""

from __future__ import annotations

from dataclasses import dataclass

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


NAV_ITEMS: tuple[NavItem, ...] = (
    NavItem("Home", "core:home", None),
    NavItem("Approvals", "approvals:inbox", "approvals.answer_approvalrequest"),
    NavItem("Runtimes", "runtimes:list", "runtimes.view_agentruntime"),
    NavItem("Tools", "registry:tool-list", "registry.view_tool"),
    NavItem("MCP servers", "registry:server-list", "registry.view_mcpserver"),
    NavItem("Gate simulator", "registry:simulator", "registry.view_tool"),
    NavItem("Skill rules", "approvals:rules", "approvals.view_skillrule"),
    NavItem("Audit log", "audit:home", "audit.view_auditevent"),
    NavItem("API docs", "api-docs", None),
)


def navigation(request: HttpRequest) -> dict[str, object]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_items": []}
    items = [item for item in NAV_ITEMS if item.permission is None or user.has_perm(item.permission)]
    current = request.path
    return {
        "nav_items": [
            {"label": item.label, "url": item.url, "current": _is_current(item.url, current)}
            for item in items
        ],
        "user_roles": user.roles if hasattr(user, "roles") else [],
    }


def _is_current(url: str, path: str) -> bool:
    return path == url if url == "/" else path.startswith(url)
