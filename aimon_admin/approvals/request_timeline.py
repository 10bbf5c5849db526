"""A request's timeline on its own page: opened, notified, viewed, answered (each item: by
whom, when, with what reach), closed, woken, and, for a call approved on its own, when the
runtime presented that approval.

Woken is when the API first sent the runtime the request closed: "woken" if that response
ended a long-poll waiting on it, "sent" if the runtime asked after the answer came. It says
sent, not received: a response sent may still be lost on its way. Notifications are added
by that app through core.timeline (approvals imports no notifications module)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from aimon_admin.approvals.choices import Answer, GrantScope, ItemScope, RequestKind, RequestStatus
from aimon_admin.approvals.models import ApprovalAllow, ApprovalItem, ApprovalRequest, RequestView
from aimon_admin.approvals.tool_rule_grammar import rule_text
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


def _allows(approval: ApprovalRequest, items: list[ApprovalItem]) -> list[Entry]:
    """P3: each person's allow of an item a rule needs several people to allow, counted."""
    if not items:
        return []
    needed = {item.pk: item for item in items}
    records = ApprovalAllow.objects.filter(item__in=items).select_related("user").order_by("created_at", "id")
    entries, counted = [], dict.fromkeys(needed, 0)
    for record in records:
        item = needed[record.item_id]
        counted[item.pk] += 1
        how = Answer(record.answer).label
        what = f"{item.skill} ({record.pattern})" if record.pattern else item.skill
        text = (
            f"{record.user.username} allowed {what}: {how}, {counted[item.pk]} of {item.approvers} approvals."
        )
        entries.append(Entry(record.created_at, "allowed", "Allowed", text))
    return entries


def _sent(approval: ApprovalRequest, at: dt.datetime) -> Entry:
    name, outcome = approval.runtime.name, approval.get_status_display().lower()  # answered, expired…
    if approval.answer_sent_to_waiter:
        text = f"{name} was waiting on this request: its wait returned with the request {outcome}."
        return Entry(at, "woken", "Woken", text)
    text = f"{name} was sent the request {outcome} when it next asked (it was not waiting on it)."
    return Entry(at, "woken", "Answer sent", text)


def request_timeline(approval: ApprovalRequest, user: Any, labels: dict[int, str]) -> list[Entry]:
    """Every step of `approval`, oldest first. `labels`: each answered item's answer in the
    buttons' words, by item id (the page has them already)."""
    asked = f" for {approval.principal}" if approval.principal else ""
    entries = [Entry(approval.created_at, "opened", "Opened", f"{approval.runtime.name} asked{asked}.")]
    views = RequestView.objects.filter(request=approval).select_related("viewer").order_by("viewed_at", "id")
    for number, view in enumerate(views[:VIEWS_SHOWN]):
        title = "First viewed" if number == 0 else "Viewed"
        entries.append(Entry(view.viewed_at, "viewed", title, f"{view.viewer.username} opened this page."))
    items = list(approval.items.all())
    for item in items:
        if item.answered:
            entries.append(_answered(approval, item, labels.get(item.pk, item.decision)))
    entries.extend(_allows(approval, [item for item in items if item.needs_several]))
    if approval.status in CLOSED and approval.closed_at is not None:
        entries.append(Entry(approval.closed_at, "closed", "Closed", CLOSED[approval.status]))
    if approval.answer_sent_at is not None:
        entries.append(_sent(approval, approval.answer_sent_at))
    if approval.call_used_at is not None:
        text = "The runtime presented this call's approval when it made the call: it had the answer."
        entries.append(Entry(approval.call_used_at, "used", "Used", text))
    entries.extend(entries_for(str(approval.pk), user))
    # Oldest first; a tie keeps the order above (opened before what it led to).
    order = {id(entry): index for index, entry in enumerate(entries)}
    return sorted(entries, key=lambda entry: (entry.at, order[id(entry)]))
