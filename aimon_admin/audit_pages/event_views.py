"""One event: what it says (a change as before and after), its place in the chain, the
grant it wrote, and links to what it concerns."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path, reverse

from aimon_admin.audit import chain
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit_pages import selectors
from aimon_admin.audit_pages.grant_views import grant_state, reach
from aimon_admin.audit_pages.page import auditor_page, url_with, utc_text

# Messages users see (tests import these).
HASH_OK = "Its hash matches its content."
HASH_BAD = "Its hash does not match its content: this event was altered."
LINK_OK = "Its prev_hash is the hash of event #{seq}."
LINK_BAD = "Its prev_hash is not the hash of event #{seq}: the chain is broken here."


@dataclass(frozen=True)
class ComparedRow:
    key: str
    before: str
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after


@dataclass(frozen=True)
class Comparison:
    label: str
    rows: list[ComparedRow]


ABSENT = "—"


def _shown(value: Any) -> str:
    if value is None:
        return ABSENT
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _compared_rows(before: Any, after: Any) -> list[ComparedRow]:
    if isinstance(before, dict | None) and isinstance(after, dict | None) and (before or after):
        before, after = before or {}, after or {}
        keys = list(before) + [key for key in after if key not in before]
        return [ComparedRow(str(key), _shown(before.get(key)), _shown(after.get(key))) for key in keys]
    return [ComparedRow("value", _shown(before), _shown(after))]


def comparisons(details: Mapping[str, Any]) -> tuple[list[Comparison], set[str]]:
    """The before/after pairs in an event's details, and which top-level keys they used.

    Writers record a change three ways: `before`/`after` at the top (runtime settings,
    roles, trust), `<x>_before`/`<x>_after` (a tool's claims and axes), and lists of
    items each with its own `before`/`after` (the tools a trust change re-resolved).
    """
    found: list[Comparison] = []
    used: set[str] = set()
    if "before" in details and "after" in details:
        found.append(Comparison("Change", _compared_rows(details["before"], details["after"])))
        used |= {"before", "after"}
    for key in details:
        stem = key.removesuffix("_before")
        if key.endswith("_before") and f"{stem}_after" in details:
            label = stem.replace("_", " ").capitalize()
            found.append(Comparison(label, _compared_rows(details[key], details[f"{stem}_after"])))
            used |= {key, f"{stem}_after"}
    for key, value in details.items():
        if not isinstance(value, list):
            continue
        items = [item for item in value if isinstance(item, dict) and "before" in item and "after" in item]
        for item in items:
            name = item.get("name") or item.get("tool") or item.get("skill") or ""
            label = f"{key.replace('_', ' ').capitalize()}: {name}" if name else key
            found.append(Comparison(label, _compared_rows(item["before"], item["after"])))
        if items and len(items) == len(value):
            used.add(key)
    return found, used


def _detail_rows(details: Mapping[str, Any], used: set[str]) -> list[tuple[str, str, bool]]:
    """(key, text, is_json) for every detail not already shown as a comparison."""
    rows = []
    for key, value in details.items():
        if key in used:
            continue
        if isinstance(value, dict | list):
            rows.append((key, json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True), True))
        else:
            rows.append(
                (key, ("yes" if value else "no") if isinstance(value, bool) else _shown(value), False)
            )
    return rows


def _integrity(event: AuditEvent, older: AuditEvent | None) -> list[tuple[bool, str]]:
    notes = [(True, HASH_OK) if chain.compute_hash(event.content()) == event.hash else (False, HASH_BAD)]
    if older is not None:
        ok = older.hash == event.prev_hash
        notes.append((ok, (LINK_OK if ok else LINK_BAD).format(seq=older.seq)))
    elif event.seq == 1:
        ok = event.prev_hash == chain.GENESIS_HASH
        notes.append(
            (ok, "It is the first event, chained to the genesis hash." if ok else LINK_BAD.format(seq=0))
        )
    return notes


@auditor_page
def event_view(request: HttpRequest, seq: int) -> HttpResponse:
    event = selectors.event_get(seq)
    if event is None:
        raise Http404("No such event.")
    older, newer = selectors.event_neighbours(seq)
    details = event.details if isinstance(event.details, dict) else {"value": event.details}
    compared, used = comparisons(details)
    grant_id = details.get("grant_id")
    grant = selectors.grants_by_id([grant_id]).get(grant_id) if isinstance(grant_id, int) else None
    links: dict[str, str] = {"action": url_with("audit:log", {"action": event.action})}
    if event.actor_label:
        links["actor"] = url_with("audit:log", {"actor": event.actor_label})
    if event.subject:
        links["subject"] = url_with("audit:log", {"subject": event.subject})
    if event.runtime is not None:
        name, at = event.runtime.name, utc_text(event.created_at)
        links["runtime"] = reverse("runtimes:detail", args=[name])
        links["runtime_log"] = url_with("audit:log", {"runtime": name})
        links["runtime_in_force"] = url_with("audit:in-force", {"runtime": name, "at": at})
        if event.session_key:
            links["session_in_force"] = url_with(
                "audit:in-force", {"runtime": name, "session": event.session_key, "at": at}
            )
    if event.session_key:
        links["session_log"] = url_with("audit:log", {"session": event.session_key})
    context = {
        "event": event,
        "older": older,
        "newer": newer,
        "comparisons": compared,
        "detail_rows": _detail_rows(details, used),
        "details_json": json.dumps(event.details, ensure_ascii=False, indent=2, sort_keys=True),
        "integrity": _integrity(event, older),
        "grant": grant,
        "grant_state": grant_state(grant) if grant else None,
        "reach": reach(grant) if grant else "",
        "links": links,
    }
    return render(request, "audit/event.html", context)


urlpatterns: list[URLPattern] = [path("events/<int:seq>/", event_view, name="event")]
