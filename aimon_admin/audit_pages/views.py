"""The auditor's log pages: home, the filtered log, one event, escalations, in force at T,
and the streamed exports.

Read-only: every view is GET (a POST is 405) and needs `audit.view_auditevent`, which the
auditor and operator roles hold. Filters live in the query string. One that cannot be
read is said in a sentence beside its field, the form kept as typed, on the same page
with status 400 (for htmx, the results area says so with status 200, as htmx 2 does not
swap a 4xx); pages without a form (escalations, exports) answer the 400 error page.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET
from django_htmx.http import push_url

from aimon_admin.approvals import selectors as approvals_selectors
from aimon_admin.approvals.choices import GrantScope
from aimon_admin.approvals.models import Grant
from aimon_admin.audit import chain, export
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.filters import (
    FIELD_LABELS,
    LOG_FIELDS,
    ONE_VALUE_MESSAGE,
    FilterError,
    LogFilters,
    parse_cursor,
    parse_filters,
    parse_time,
    time_input_value,
)
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.verification import last_verification
from aimon_admin.audit_pages import selectors

PERMISSION = "audit.view_auditevent"
# Messages users see (tests import these).
BAD_FILTER_TITLE = "This filter cannot be read"
BAD_FILTER_MESSAGE = "{label}: {problem}"
NOT_A_FILTER_MESSAGE = "This page has no filter named {name!r}."
NOT_A_FIELD_MESSAGE = "This page has no field named {name!r}."
SESSION_NEEDS_RUNTIME_MESSAGE = "Name the runtime too: sessions are named per runtime."
# The fields of the pages' forms, by the names they have in the query string.
LABELS = {**FIELD_LABELS, "at": "At"}
REACH_WORDS = (
    "All sessions of runtime {runtime}",
    "no expiry",
    "survives Clear",
    # One agent-wide grant can also be revoked on its own.
    "holds until it is revoked, on its own or with Revoke agent-wide",
)
HASH_OK = "Its hash matches its content."
HASH_BAD = "Its hash does not match its content: this event was altered."
LINK_OK = "Its prev_hash is the hash of event #{seq}."
LINK_BAD = "Its prev_hash is not the hash of event #{seq}: the chain is broken here."


def _auditor(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """GET only, signed in (else the login page), and the audit permission (else 403)."""
    return require_GET(login_required(permission_required(PERMISSION, raise_exception=True)(view)))


def _render(
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    partial: str | None = None,
    status: int = 200,
) -> HttpResponse:
    """The page, or its named partial for an htmx request (not for htmx restoring history)."""
    htmx = getattr(request, "htmx", None)
    name = f"{template}#{partial}" if partial and htmx and not htmx.history_restore_request else template
    response = render(request, name, context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    return response


def filter_message(error: FilterError) -> str:
    """The sentence above the results: "Runtime: No runtime is named 'nope'." (a field the
    page does not have is named in the problem itself)."""
    label = LABELS.get(error.field)
    return BAD_FILTER_MESSAGE.format(label=label, problem=error.problem) if label else error.problem


def _bad_filter(request: HttpRequest, error: FilterError) -> HttpResponse:
    """The 400 error page, for pages with no form to keep."""
    context = {
        "status": 400,
        "title": BAD_FILTER_TITLE,
        "message": filter_message(error),
        "request_id": getattr(request, "request_id", ""),
    }
    return render(request, "core/error.html", context, status=400)


def _params(request: HttpRequest) -> dict[str, list[str]]:
    return {key: request.GET.getlist(key) for key in request.GET}


def _url(name: str, query: str = "", *args: Any) -> str:
    base = reverse(name, args=args)
    return f"{base}?{query}" if query else base


# --- Home ---------------------------------------------------------------------------------------


@_auditor
def home_view(request: HttpRequest) -> HttpResponse:
    in_force = approvals_selectors.escalated_grants_in_force(limit=selectors.IN_FORCE_COUNT_LIMIT)
    context = {
        "escalations_in_force": in_force,
        "escalations_in_force_label": (
            f"{selectors.IN_FORCE_COUNT_LIMIT}+"
            if in_force > selectors.IN_FORCE_COUNT_LIMIT
            else str(in_force)
        ),
        "latest_escalations": selectors.latest_events(action=AuditAction.SKILL_GRANT_ESCALATED),
        "latest_warnings": selectors.latest_events(level=AuditLevel.WARNING),
        "verification": last_verification(),
        "warnings_url": _url("audit:log", "level=WARNING"),
    }
    return render(request, "audit/home.html", context)


# --- The log ------------------------------------------------------------------------------------


# The log's action labels, read once: get_action_display() walks every choice on each call,
# twice per row, and a page of the log is in the hot path of an auditor's day.
ACTION_LABELS = dict(AuditAction.choices)
LEVEL_LABELS = dict(AuditLevel.choices)
NONE_SHOWN = "—"


@dataclass(frozen=True)
class LogRow:
    """One line of the log, every text it shows worked out once (each is shown twice: in
    the cell, cut to fit, and whole in its title)."""

    seq: int
    created_at: dt.datetime
    level: str
    level_label: str
    action: str
    actor: str
    channel: str
    runtime: str
    session: str
    subject: str

    @classmethod
    def of(cls, event: AuditEvent) -> LogRow:
        return cls(
            seq=event.seq,
            created_at=event.created_at,
            level=event.level,
            level_label=LEVEL_LABELS.get(event.level, event.level),
            action=ACTION_LABELS.get(event.action, event.action),
            actor=event.actor_label,
            channel=event.channel.lower(),
            runtime=event.runtime.name if event.runtime is not None else NONE_SHOWN,
            session=event.session_key or NONE_SHOWN,
            subject=event.subject or NONE_SHOWN,
        )


def _log_context(filters: LogFilters, page: selectors.EventPage, before: int | None) -> dict[str, Any]:
    query = filters.querystring()
    return {
        "filters": filters,
        "events": [LogRow.of(event) for event in page.events],
        "paged": before is not None,
        "before": before,
        "newest_url": _url("audit:log", query),
        "older_url": (
            _url("audit:log", filters.querystring(before=page.older_cursor)) if page.older_cursor else ""
        ),
        "csv_url": _url("audit:export-csv", query),
        "jsonl_url": _url("audit:export-jsonl", query),
        "event_url": reverse("audit:event", args=[0]).removesuffix("0/"),
    }


@dataclass(frozen=True)
class FilterField:
    """One field of a filter form as the page shows it: the value as typed, its error."""

    name: str
    label: str
    value: str
    kind: str = "text"  # the <input> type
    hint: str = ""  # said after the label
    placeholder: str = ""
    error: str = ""
    datalist: str = ""  # the id of a <datalist> of suggestions
    required: bool = False

    @property
    def id(self) -> str:
        return f"f-{self.name}"

    @property
    def step(self) -> str:
        """A picker's step: minutes (the default, left out), or the second or millisecond of
        a value given to one, so the browser takes the value as it is."""
        if "." in self.value:
            return "0.001"
        return "1" if self.value.count(":") == 2 else ""


# The log's text filters: (name, placeholder).
TEXT_FILTERS = (("actor", "username or runtime:name"), ("runtime", ""), ("session", ""), ("subject", ""))
TIME_HINT = "UTC"
AT_HINT = "UTC; leave it empty for now"


def _first(params: Mapping[str, list[str]], name: str) -> str:
    return next((value.strip() for value in params.get(name, ()) if value.strip()), "")


def time_field(
    name: str, typed: str, *, end: bool, error: FilterError | None, hint: str = TIME_HINT
) -> FilterField:
    """A date-time picker (UTC), showing what was typed as the same bound; a value it
    cannot show (text that is no time) stays a text box holding it, to be corrected."""
    shown = time_input_value(typed, end=end) if typed else ""
    wrong = error.problem if error and error.field == name else ""
    if shown is None:
        return FilterField(name, LABELS[name], typed, kind="text", hint=hint, error=wrong)
    return FilterField(name, LABELS[name], shown, kind="datetime-local", hint=hint, error=wrong)


def _form_context(params: Mapping[str, list[str]], error: FilterError | None = None) -> dict[str, Any]:
    """The filter form as typed (also when a value cannot be read), with the error beside
    the field it is about."""

    def wrong(name: str) -> str:
        return error.problem if error and error.field == name else ""

    actions = {value.strip() for value in params.get("action", ())}
    return {
        "action_choices": [
            {"value": value, "label": label, "selected": value in actions}
            for value, label in AuditAction.choices
        ],
        "action_error": wrong("action"),
        "level_choices": AuditLevel.choices,
        "level": _first(params, "level"),
        "level_error": wrong("level"),
        "text_fields": [
            FilterField(name, LABELS[name], _first(params, name), placeholder=placeholder, error=wrong(name))
            for name, placeholder in TEXT_FILTERS
        ],
        "time_fields": [
            time_field(name, _first(params, name), end=name == "until", error=error)
            for name in ("since", "until")
        ],
    }


@_auditor
def log_view(request: HttpRequest) -> HttpResponse:
    params = _params(request)
    try:
        filters = parse_filters(params)
        before = parse_cursor(params)
        page = selectors.event_page(filters=filters, before=before, size=selectors.PAGE_SIZE)
    except FilterError as error:
        # The page as it was asked for, the form kept, the error beside its field; for htmx
        # the results area says it (with 200: htmx 2 does not swap a 4xx).
        context = {
            **_form_context(params, error),
            "filter_error": filter_message(error),
            "filter_field": error.field,
            "filter_anchor": f"f-{error.field}" if error.field in LOG_FIELDS else "",
        }
        htmx = getattr(request, "htmx", None)
        return _render(request, "audit/log.html", context, "results", status=200 if htmx else 400)
    context = {**_log_context(filters, page, before), **_form_context(params)}
    response = _render(request, "audit/log.html", context, "results")
    if getattr(request, "htmx", None):
        # The address bar gets the canonical query (no blank filters), not the raw form.
        push_url(response, _url("audit:log", filters.querystring(**({"before": before} if before else {}))))
    return response


# --- One event ----------------------------------------------------------------------------------


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
                (key, _shown(value) if not isinstance(value, bool) else ("yes" if value else "no"), False)
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


def _at(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@_auditor
def event_view(request: HttpRequest, seq: int) -> HttpResponse:
    event = selectors.event_get(seq)
    if event is None:
        raise Http404("No such event.")
    older, newer = selectors.event_neighbours(seq)
    details = event.details if isinstance(event.details, dict) else {"value": event.details}
    compared, used = comparisons(details)
    grant_id = details.get("grant_id")
    grant = selectors.grants_by_id([grant_id]).get(grant_id) if isinstance(grant_id, int) else None
    links: dict[str, str] = {"action": _url("audit:log", f"action={event.action}")}
    if event.actor_label:
        links["actor"] = _url("audit:log", urlencode({"actor": event.actor_label}))
    if event.subject:
        links["subject"] = _url("audit:log", urlencode({"subject": event.subject}))
    if event.runtime is not None:
        links["runtime"] = reverse("runtimes:detail", args=[event.runtime.name])
        links["runtime_log"] = _url("audit:log", urlencode({"runtime": event.runtime.name}))
        links["runtime_in_force"] = _url(
            "audit:in-force", urlencode({"runtime": event.runtime.name, "at": _at(event.created_at)})
        )
        if event.session_key:
            links["session_in_force"] = _url(
                "audit:in-force",
                urlencode(
                    {"runtime": event.runtime.name, "session": event.session_key, "at": _at(event.created_at)}
                ),
            )
    if event.session_key:
        links["session_log"] = _url("audit:log", urlencode({"session": event.session_key}))
    context = {
        "event": event,
        "older": older,
        "newer": newer,
        "comparisons": compared,
        "detail_rows": _detail_rows(details, used),
        "details_json": json.dumps(event.details, ensure_ascii=False, indent=2, sort_keys=True),
        "integrity": _integrity(event, older),
        "grant": grant,
        "grant_state": _grant_state(grant) if grant else None,
        "reach": _reach(grant) if grant and grant.scope == GrantScope.AGENT else "",
        "links": links,
    }
    return render(request, "audit/event.html", context)


# --- Escalated grants (S6) ----------------------------------------------------------------------


def _reach(grant: Grant) -> str:
    words = list(REACH_WORDS)
    words[0] = words[0].format(runtime=grant.runtime.name)
    if grant.expires_at is not None:
        words[1] = f"expires {_at(grant.expires_at)}"
    return ", ".join(words)


def _grant_state(grant: Grant, now: dt.datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    if grant.revoked_at is not None:
        return {
            "in_force": False,
            "when": grant.revoked_at,
            "by": grant.revoked_by.username if grant.revoked_by else "",
            "why": grant.get_revoke_reason_display(),
        }
    if grant.expires_at is not None and grant.expires_at <= now:
        return {"in_force": False, "when": grant.expires_at, "by": "", "why": "Expired"}
    return {"in_force": True}


@_auditor
def escalations_view(request: HttpRequest) -> HttpResponse:
    params = _params(request)
    try:
        for name in params:
            if name not in ("runtime", "before"):
                raise FilterError(name, NOT_A_FILTER_MESSAGE.format(name=name))
        runtime_name = ",".join(v.strip() for v in params.get("runtime", []) if v.strip())
        runtime = selectors.runtime_named(runtime_name) if runtime_name else None
        before = parse_cursor(params)
    except FilterError as error:
        return _bad_filter(request, error)
    page = selectors.escalation_page(before=before, runtime=runtime, size=selectors.ESCALATION_PAGE_SIZE)
    now = timezone.now()
    rows = [
        {
            "event": row.event,
            "grant": row.grant,
            "reach": _reach(row.grant) if row.grant else "",
            "state": _grant_state(row.grant, now) if row.grant else None,
        }
        for row in page.rows
    ]
    base_query = urlencode({"runtime": runtime.name}) if runtime else ""
    context = {
        "rows": rows,
        "runtime": runtime,
        "paged": before is not None,
        "newest_url": _url("audit:escalations", base_query),
        "older_url": (
            _url("audit:escalations", "&".join(q for q in (base_query, f"before={page.older_cursor}") if q))
            if page.older_cursor
            else ""
        ),
    }
    return render(request, "audit/escalations.html", context)


# --- In force at a moment ----------------------------------------------------------------------


@_auditor
def in_force_view(request: HttpRequest) -> HttpResponse:
    params = _params(request)
    values = {name: _first(params, name) for name in ("runtime", "session", "at")}
    context: dict[str, Any] = {"result": None}
    failed: FilterError | None = None
    try:
        for name, given in params.items():
            if name not in values:
                raise FilterError(name, NOT_A_FIELD_MESSAGE.format(name=name))
            if len(given) > 1:
                raise FilterError(name, ONE_VALUE_MESSAGE.format(count=len(given)))
        if values["session"] and not values["runtime"]:
            raise FilterError("runtime", SESSION_NEEDS_RUNTIME_MESSAGE)
        at = parse_time("at", values["at"], end=False) if values["at"] else timezone.now()
        if values["runtime"]:
            runtime = selectors.runtime_named(values["runtime"])
            session = (
                selectors.session_named(runtime=runtime, session_id=values["session"])
                if values["session"]
                else None
            )
            context["result"] = selectors.grants_in_force_at(runtime=runtime, session=session, at=at)
    except FilterError as error:
        failed = error
        context["filter_error"] = filter_message(error)
        context["filter_field"] = error.field

    def wrong(name: str) -> str:
        return failed.problem if failed and failed.field == name else ""

    context["fields"] = [
        FilterField(
            "runtime",
            "Runtime",
            values["runtime"],
            error=wrong("runtime"),
            datalist="runtime-names",
            required=True,
        ),
        FilterField("session", "Session (optional)", values["session"], error=wrong("session")),
        time_field("at", values["at"], end=False, error=failed, hint=AT_HINT),
    ]
    if context["result"] is not None:
        now = timezone.now()
        context["rows"] = [
            {
                "grant": grant,
                "reach": _reach(grant) if grant.scope == GrantScope.AGENT else "",
                "state": _grant_state(grant, now),
            }
            for grant in context["result"].grants
        ]
    context["runtime_names"] = selectors.runtime_names()
    return render(request, "audit/in_force.html", context, status=400 if failed else 200)


# --- Export -------------------------------------------------------------------------------------


async def _stream(
    cursor: selectors.ExportCursor, encode: Callable[[AuditEvent], str], header: str = ""
) -> AsyncIterator[bytes]:
    """The export, one keyset chunk at a time, each read and encoded in a worker thread.

    An async generator on purpose: served over ASGI, Django iterates it as it goes, where
    a synchronous iterator would first be read whole into a list.
    """
    if header:
        yield header.encode()

    def read(after: int) -> tuple[bytes, int | None]:
        size = export.EXPORT_CHUNK_SIZE
        events = cursor.chunk(after, size)
        body = "".join(encode(event) for event in events).encode()
        more = len(events) == size and events[-1].seq < cursor.head
        return body, (events[-1].seq if more else None)

    after: int | None = 0
    while after is not None:
        body, after = await sync_to_async(read, thread_sensitive=True)(after)
        if body:
            yield body


def _export(request: HttpRequest, kind: str) -> HttpResponse:
    try:
        filters = parse_filters(_params(request), allowed_extra=())
        cursor = selectors.ExportCursor(filters)
    except FilterError as error:
        return _bad_filter(request, error)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    if kind == "csv":
        content = _stream(cursor, lambda e: export.csv_row(e.content(), e.hash), export.csv_header())
        response = StreamingHttpResponse(content, content_type="text/csv; charset=utf-8")
    else:
        content = _stream(cursor, lambda e: export.jsonl_line(e.content(), e.hash))
        response = StreamingHttpResponse(content, content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="audit-events-{stamp}.{kind}"'
    response["Cache-Control"] = "no-store"
    response["X-Content-Type-Options"] = "nosniff"
    return response


@_auditor
def export_csv_view(request: HttpRequest) -> HttpResponse:
    return _export(request, "csv")


@_auditor
def export_jsonl_view(request: HttpRequest) -> HttpResponse:
    return _export(request, "jsonl")


urlpatterns: list[URLPattern] = [
    path("", home_view, name="home"),
    path("events/", log_view, name="log"),
    path("events/export.csv", export_csv_view, name="export-csv"),
    path("events/export.jsonl", export_jsonl_view, name="export-jsonl"),
    path("events/<int:seq>/", event_view, name="event"),
    path("escalations/", escalations_view, name="escalations"),
    path("in-force/", in_force_view, name="in-force"),
]
