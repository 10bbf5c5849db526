"""What a tool request's card shows (U2, U3): the tool and its server, the server's trust
and raw claims beside the resolved axes in plain words, the arguments in full (long ones
folded, expandable; shown as text, never run or rendered as HTML), the subject, the patterns
an answer may carry, and the reach of each button before the click (S5)."""

from __future__ import annotations

import json
from typing import Any

from aimon_admin.approvals import selectors, subject_patterns, tool_rule_grammar
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.registry import policy as registry_policy

CALL_REACH = "this call only, with exactly these arguments, once; nothing is stored for any other call"
SESSION_PATTERN_REACH = (
    "calls of {tool} matching the pattern picked above, in {where}, until the session is cleared, "
    "revoked or idle past its time-out"
)
AGENT_PATTERN_REACH = "calls of {tool} matching the pattern picked above, in every session of {runtime}"
DENY_PATTERN_REACH = "refuses calls of {tool} matching the pattern picked above, in {where}"
UNREGISTERED_NOTE = "Nobody registered this tool, so it counts as writing, destructive and not idempotent."
NO_SUBJECT_NOTE = (
    "No subject argument is named for this tool, so an answer for the session or the agent "
    "covers the whole tool, or (for a destructive tool) is not offered: allow this call alone."
)
# Why a pattern is offered for Deny alone.
WHOLE_DESTRUCTIVE_DENY_ONLY = "Deny only: a destructive tool is never allowed wholesale"
FLOOR_DENY_ONLY = "Deny only: {rule} needs {people} people to allow what this reaches"
TOO_WIDE_DENY_ONLY = "Deny only: too wide to allow for this call"
# Arguments longer than this (characters of formatted JSON, or lines) are folded, expandable.
ARGUMENT_FOLD_CHARS = 200
ARGUMENT_FOLD_LINES = 8
ARGUMENT_PREVIEW_CHARS = 80


def tool_call_card(approval: ApprovalRequest, patterns: selectors.ToolCallPatterns) -> dict[str, Any]:
    """The tool part of a request card; `patterns` as the answers were offered from."""
    registered = selectors.tool_for_request(request=approval)
    label = tool_rule_grammar.tool_label(server=approval.server, tool=approval.tool)
    holder = approval.session or approval.invoking_session
    where = f"session {holder.session_id}" if holder is not None else "this session"
    server = registered.server if registered is not None and registered.server_id else None
    claims = registered.claims if registered is not None else None
    return {
        "label": label,
        "name": approval.tool,
        "server": approval.server,
        "registered": patterns.registered,
        "unregistered_note": UNREGISTERED_NOTE,
        "trust": server.annotation_trust if server is not None else "",
        "claims": pretty(claims) if claims is not None else "",
        "axes": registry_policy.axes_words(patterns.axes),
        "subject_argument": approval.subject_argument,
        "subject": approval.subject,
        "no_subject_note": NO_SUBJECT_NOTE,
        "arguments": arguments_shown(approval),
        "digest": approval.arguments_digest,
        "patterns": pattern_options(approval, patterns),
        "reach": {
            Answer.ALLOW_CALL.value: CALL_REACH,
            Answer.ALLOW_SESSION.value: SESSION_PATTERN_REACH.format(tool=label, where=where),
            Answer.ALLOW_AGENT.value: AGENT_PATTERN_REACH.format(tool=label, runtime=approval.runtime.name),
            Answer.DENY.value: DENY_PATTERN_REACH.format(tool=label, where=where),
        },
    }


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def arguments_shown(approval: ApprovalRequest) -> list[dict[str, Any]]:
    """Each argument as formatted JSON; a long one folded behind its first characters."""
    shown = []
    for name, value in (approval.arguments or {}).items():
        text = pretty(value)
        folded = len(text) > ARGUMENT_FOLD_CHARS or text.count("\n") >= ARGUMENT_FOLD_LINES
        shown.append(
            {
                "name": name,
                "text": text,
                "folded": folded,
                "preview": text[:ARGUMENT_PREVIEW_CHARS].replace("\n", " "),
                "length": len(text),
                "is_subject": bool(approval.subject_argument) and name == approval.subject_argument,
            }
        )
    return shown


def pattern_options(approval: ApprovalRequest, patterns: selectors.ToolCallPatterns) -> list[dict[str, Any]]:
    """The patterns offered (U3), narrowest first (the first is checked); the whole of a
    destructive tool for a Deny only."""
    label = tool_rule_grammar.tool_label(server=approval.server, tool=approval.tool)
    options = []
    for value in patterns.deny:
        if value == "":
            text = f"The whole tool: every call of {label}"
        elif value.endswith(":*") and value != approval.subject:
            # U1: the reach says that the prefix covers every argument after it.
            text = f"Starting with “{value[:-2]}”, with any arguments after it"
        else:
            text = f"Exactly “{value}”"
        options.append(
            {
                "value": value,
                "text": text,
                "rule": tool_rule_grammar.rule_text(
                    server=approval.server, tool=approval.tool, pattern=value
                ),
                "deny_only": _deny_only(value, patterns) if value not in patterns.allow else "",
            }
        )
    return options


def _deny_only(value: str, patterns: selectors.ToolCallPatterns) -> str:
    """Why a pattern offered for Deny is not offered for an allow."""
    if value == "" and not subject_patterns.whole_tool_allowed(patterns.axes):
        return WHOLE_DESTRUCTIVE_DENY_ONLY
    for rule in patterns.floors:  # P3: it reaches what a rule needs more people for
        if subject_patterns.may_reach_into(value, rule.pattern, patterns.kind):
            return FLOOR_DENY_ONLY.format(rule=rule.text, people=rule.approvers)
    return TOO_WIDE_DENY_ONLY
