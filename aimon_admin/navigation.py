"""The menu: the navigation each person sees, grouped by job, from the permissions their
role grants, and the context processor that puts it on every page (settings TEMPLATES);
and the help's first screen, a quick start per role naming the pages that role opens.

It names every app's pages, so it sits at the project level above the domain apps, which
never import it (tests/test_layers.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from django.urls import reverse

from aimon_admin.accounts.roles import Role


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


@dataclass(frozen=True)
class QuickStart:
    """One role's first screen of the help: what the role does here, the three pages it will
    click first, and the documents (core.help's page names) it has use for."""

    role: str
    title: str
    summary: str
    steps: tuple[tuple[NavItem, str], ...]
    documents: tuple[str, ...]


# One per role, in the order of Role. Every step is a page that role's permissions open
# (tests/core/test_help.py); the documents not named are still listed on /help/, below.
QUICK_STARTS: tuple[QuickStart, ...] = (
    QuickStart(
        Role.OPERATOR,
        "Operator: where to start",
        "You decide what agents may do: you register the agent runtimes and the MCP servers "
        "they use, say how far each may go, write the rules, and hand runtimes their tokens. "
        "You can also answer every request.",
        (
            (
                NavItem("Runtimes", "runtimes:list", "runtimes.view_agentruntime"),
                "register a runtime, set its ceiling and approval gate, issue its token and "
                "copy what connects it (the MCP gateway, the Claude Code hook).",
            ),
            (
                NavItem("MCP servers", "registry:server-list", "registry.view_mcpserver"),
                "add a server, sync its tools and decide how far to trust what it says about them.",
            ),
            (
                NavItem("Rules", "approvals:rules", "approvals.view_skillrule"),
                "allow, ask or deny skills and tool calls, and say how many people must allow.",
            ),
        ),
        ("concepts", "operations", "mcp-gateway", "claude-code-hook", "runtime-client", "api", "performance"),
    ),
    QuickStart(
        Role.APPROVER,
        "Approver: where to start",
        "Agents working for you ask before they use a skill or a tool that needs a person. "
        "You answer: allow once, for this session or always for this agent, or deny; and you "
        "can take back what you allowed.",
        (
            (
                NavItem("Inbox", "approvals:inbox", "approvals.answer_approvalrequest"),
                "the requests waiting for your answer; each button says what it reaches before you click.",
            ),
            (
                NavItem("Sessions", "approvals:sessions", "approvals.answer_approvalrequest"),
                "what each of your sessions may do and why, with Clear session and Revoke.",
            ),
            (
                NavItem("My notifications", "notifications:channels", "approvals.answer_approvalrequest"),
                "be told of a request away from the inbox: email, a phone push, a chat.",
            ),
        ),
        ("concepts",),
    ),
    QuickStart(
        Role.AUDITOR,
        "Auditor: where to start",
        "You read what happened. Every change is an audit event, chained so that an edit or a "
        "deletion shows; you can read runtimes, tools and rules but change nothing.",
        (
            (
                NavItem("Audit overview", "audit:home", "audit.view_auditevent"),
                "escalated grants still in force, the latest warnings, and the chain's "
                "verification with Verify now.",
            ),
            (
                NavItem("Audit log", "audit:log", "audit.view_auditevent"),
                "every event, filtered by who, what and when; export it as CSV or JSON Lines.",
            ),
            (
                NavItem("Escalated grants", "audit:escalations", "audit.view_auditevent"),
                "every session answer that became agent-wide, and whether it still holds.",
            ),
        ),
        ("concepts", "operations"),
    ),
)


def help_for(user: Any) -> tuple[list[dict[str, Any]], list[str] | None]:
    """The help's first screen for this person (settings.AIMON_HELP_FOR_READER): a quick
    start per role they hold, each step one they may open, and the help pages for their
    roles (None: every page, for someone signed out or with no role)."""
    if not getattr(user, "is_authenticated", False):
        return [], None
    starts = [start for start in QUICK_STARTS if user.has_role(start.role)]
    if not starts:
        return [], None
    quick = [
        {
            "title": start.title,
            "summary": start.summary,
            "steps": [
                {"label": item.label, "url": item.url, "what": what}
                for item, what in start.steps
                if user.has_perm(item.permission)
            ],
        }
        for start in starts
    ]
    documents = list(dict.fromkeys(name for start in starts for name in start.documents))
    return quick, documents
