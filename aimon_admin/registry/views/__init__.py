"""Operator and auditor pages for the registry: MCP servers (settings, sync, trust), the tool
list and tool pages, the gate simulator and the NON_DESTRUCTIVE worklist.

Every rule comes from `policy` or a service; these views only gather, call and render.
A page answers an htmx request with its named partial and a plain request with the page.
"""

from __future__ import annotations

from aimon_admin.registry.views.findings import (
    FINDING_ACCEPTED,
    FINDING_ACCEPTED_HELD,
    FINDING_DISMISSED,
    NOT_SERVED_NEVER_LISTED,
    NOT_SERVED_NO_LONGER_LISTED,
    RELAY_RULE,
    finding_accept_view,
    finding_dismiss_view,
)
from aimon_admin.registry.views.gate import (
    FORECAST,
    OUTCOME_ASKS,
    OUTCOME_DENIED_UNATTENDED,
    OUTCOME_HIDDEN,
    OUTCOME_NO_QUESTION,
    OUTCOMES,
    outcome_label,
    simulator_view,
    worklist_view,
)
from aimon_admin.registry.views.retire import SERVER_RETIRED, server_retire_view
from aimon_admin.registry.views.servers import (
    IGNORE_MEANS,
    SERVER_CREATED,
    SERVER_SAVED,
    SERVER_UNCHANGED,
    SYNC_QUEUED,
    TRUST_CHANGED,
    TRUST_MEANS,
    TRUST_PREVIEW_STALE,
    TRUST_UNCHANGED,
    server_create_view,
    server_detail_view,
    server_edit_view,
    server_list_view,
    server_sync_run_view,
    server_sync_view,
    server_trust_view,
)
from aimon_admin.registry.views.tools import (
    DEFINITION_ACCEPTED,
    REVIEW_RECORDED,
    TOOL_PAGE_SIZE,
    tool_accept_view,
    tool_detail_view,
    tool_list_view,
    tool_review_view,
    tool_subject_view,
)

__all__ = [
    "DEFINITION_ACCEPTED",
    "FINDING_ACCEPTED",
    "FINDING_ACCEPTED_HELD",
    "FINDING_DISMISSED",
    "FORECAST",
    "IGNORE_MEANS",
    "NOT_SERVED_NEVER_LISTED",
    "NOT_SERVED_NO_LONGER_LISTED",
    "OUTCOMES",
    "OUTCOME_ASKS",
    "OUTCOME_DENIED_UNATTENDED",
    "OUTCOME_HIDDEN",
    "OUTCOME_NO_QUESTION",
    "RELAY_RULE",
    "REVIEW_RECORDED",
    "SERVER_CREATED",
    "SERVER_RETIRED",
    "SERVER_SAVED",
    "SERVER_UNCHANGED",
    "SYNC_QUEUED",
    "TOOL_PAGE_SIZE",
    "TRUST_CHANGED",
    "TRUST_MEANS",
    "TRUST_PREVIEW_STALE",
    "TRUST_UNCHANGED",
    "finding_accept_view",
    "finding_dismiss_view",
    "outcome_label",
    "server_create_view",
    "server_detail_view",
    "server_edit_view",
    "server_list_view",
    "server_retire_view",
    "server_sync_run_view",
    "server_sync_view",
    "server_trust_view",
    "simulator_view",
    "tool_accept_view",
    "tool_detail_view",
    "tool_list_view",
    "tool_review_view",
    "tool_subject_view",
    "worklist_view",
]
