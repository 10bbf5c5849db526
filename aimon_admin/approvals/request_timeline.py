"""A request's timeline on its own page (issue 17 item 8): opened, notified, viewed,
answered (each item: by whom, when, with what reach), closed, and, for a call approved on
its own, when the runtime presented that approval.

What happened to the waiting runtime otherwise is not shown: a long-poll that returns the
answer records nothing (it is the hot path, and a response sent is not a response
received), so the page cannot say honestly when the runtime woke. Notifications are added
by that app through core.timeline (approvals imports no notifications module)."""

from __future__ import annotations

from typing import Any

from aimon_admin.approvals.choices import GrantScope, ItemScope, RequestKind, RequestStatus
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, RequestView
from aimon_admin.approvals.tool_policy import rule_text
from aimon_admin.core.timeline import Entry, entries_for

# Where an answered item's answer holds, as the timeline says it.
REACH = {
    ItemScope.TURN: "for this turn only",
    ItemScope.SESSION: "for this session",
    ItemScope.AGENT: "for every session of {runtime}, now and future (agent-wide)",
    ItemScope.REQUEST: "for this request only; nothing stored",
    ItemScope.CALL: "for this call only, with exactly these arguments, once",
}
CLOSED = {
    RequestStatus.EXPIRED: "Nobody answered in time: the request expired.",
    RequestStatus.CANCELLED: "The request was cancelled (by the runtime, or by a person's Deny the rest).",
}
VIEWS_SHOWN = 20


def _what(approval: ApprovalRequest, item: ApprovalItem) -> str:
    """The item's name, a tool item with the pattern its answer covers."""
    if approval.kind != RequestKind.TOOL:
        return item.skill
    if item.scope in (GrantScope.SESSION, GrantScope.AGENT) or item.pattern:
        return rule_text(server=approval.server, tool=item.skill, pattern=item.pattern)
    return approval.tool


def _answered(approval: ApprovalRequest, item: ApprovalItem, label: str) -> Entry:
    reach = REACH.get(item.scope, item.scope.lower()).format(runtime=approval.runtime.name)
    what = _what(approval, item)
    at = item.answered_at or approval.created_at
    if item.answered_by_id is not None:
        text = f"{item.answered_by.username} answered {what}: {label}, {reach}."
        return Entry(at, "answered", "Answered", text)
    if item.source:
        source = item.get_source_display()
        text = f"{what} was already decided when the request opened ({source}): {label}, {reach}."
        return Entry(at, "answered", "Decided", text)
    text = f"{what} was denied as the request closed unanswered: {label}, {reach} (never agent-wide)."
    return Entry(at, "answered", "Denied unanswered", text)


def request_timeline(approval: ApprovalRequest, user: Any, labels: dict[int, str]) -> list[Entry]:
    """Every step of `approval`, oldest first. `labels`: each answered item's answer in the
    buttons' words, by item id (the page has them already)."""
    asked = f" for {approval.principal}" if approval.principal else ""
    entries = [Entry(approval.created_at, "opened", "Opened", f"{approval.runtime.name} asked{asked}.")]
    views = RequestView.objects.filter(request=approval).select_related("viewer").order_by("viewed_at", "id")
    for number, view in enumerate(views[:VIEWS_SHOWN]):
        title = "First viewed" if number == 0 else "Viewed"
        entries.append(Entry(view.viewed_at, "viewed", title, f"{view.viewer.username} opened this page."))
    for item in approval.items.all():
        if item.answered:
            entries.append(_answered(approval, item, labels.get(item.pk, item.decision)))
    if approval.status in CLOSED and approval.closed_at is not None:
        entries.append(Entry(approval.closed_at, "closed", "Closed", CLOSED[approval.status]))
    if approval.call_used_at is not None:
        text = "The runtime presented this call's approval when it made the call: it had the answer."
        entries.append(Entry(approval.call_used_at, "used", "Used", text))
    entries.extend(entries_for(str(approval.pk), user))
    # Oldest first; a tie keeps the order above (opened before what it led to).
    order = {id(entry): index for index, entry in enumerate(entries)}
    return sorted(entries, key=lambda entry: (entry.at, order[id(entry)]))
