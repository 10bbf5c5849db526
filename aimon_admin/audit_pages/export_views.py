"""The filtered log as a streamed download, CSV or JSON Lines, each line hashed as in the
chain so it can be verified outside the product (A2)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import URLPattern, path
from django.utils import timezone

from aimon_admin.approvals.inbox_filter import bad_filter
from aimon_admin.audit import export
from aimon_admin.audit.filters import FilterError, parse_filters
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit_pages import selectors
from aimon_admin.audit_pages.filter_form import filter_message
from aimon_admin.audit_pages.page import auditor_page


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


@auditor_page
def export_view(request: HttpRequest, kind: str) -> HttpResponse:
    try:
        filters = parse_filters(dict(request.GET.lists()), allowed_extra=())
        cursor = selectors.ExportCursor(filters)
    except FilterError as error:
        return bad_filter(request, filter_message(error))
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


urlpatterns: list[URLPattern] = [
    path("events/export.csv", export_view, {"kind": "csv"}, name="export-csv"),
    path("events/export.jsonl", export_view, {"kind": "jsonl"}, name="export-jsonl"),
]
