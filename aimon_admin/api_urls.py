"""The runtime API, v1 (docs/api.md). Each app adds its routes here."""

from __future__ import annotations

from collections.abc import Callable

from django.urls import URLPattern, re_path

from aimon_admin.approvals.api import decisions, requests, sessions
from aimon_admin.registry.api import views as registry_views
from aimon_admin.runtimes.api.views import runtime_self

app_name = "api"


def api_path(route: str, view: Callable, name: str) -> URLPattern:
    """A route whose trailing slash is optional (docs/api.md "Basics")."""
    return re_path(rf"^{route}/?$", view, name=name)


urlpatterns = [
    api_path("runtime", runtime_self, name="runtime-self"),
    api_path("skill-decisions", decisions.skill_decisions, name="skill-decisions"),
    api_path("approval-requests", requests.approval_requests, name="approval-requests"),
    api_path(
        r"approval-requests/(?P<request_id>[^/]+)",
        requests.approval_request_detail,
        name="approval-request-detail",
    ),
    api_path(
        r"approval-requests/(?P<request_id>[^/]+)/cancel",
        requests.approval_request_cancel,
        name="approval-request-cancel",
    ),
    # A session id may hold "/" (sent as %2F): the greedy group takes all but the verb. It takes
    # any character, a newline too ((?s:…)), so a bad id reaches the view and gets its 400
    # naming session_id rather than a 404 for the route.
    api_path(r"sessions/(?P<session_id>(?s:.+))/clear", sessions.session_clear, name="session-clear"),
    api_path(r"sessions/(?P<session_id>(?s:.+))/revoke", sessions.session_revoke, name="session-revoke"),
    api_path("tools", registry_views.tools, name="tools"),
    api_path("tool-decisions", decisions.tool_decisions, name="tool-decisions"),
    api_path("tool-approval-requests", requests.tool_approval_requests, name="tool-approval-requests"),
    api_path(
        r"tool-approval-requests/(?P<request_id>[^/]+)",
        requests.tool_approval_request_detail,
        name="tool-approval-request-detail",
    ),
    api_path(
        r"tool-approval-requests/(?P<request_id>[^/]+)/cancel",
        requests.tool_approval_request_cancel,
        name="tool-approval-request-cancel",
    ),
    api_path("mcp-servers", registry_views.mcp_servers, name="mcp-servers"),
    api_path(r"mcp-servers/(?P<name>[^/]+)/tools", registry_views.mcp_server_tools, name="mcp-server-tools"),
]
