"""The exports: the filtered log as JSON Lines and CSV, streamed chunk by chunk through an
async iterator (constant memory under ASGI), each event with its chain hash so an export
can be verified outside the product (A2)."""

from __future__ import annotations

import csv
import io
import json
import re
import warnings

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.http import StreamingHttpResponse
from django.test import AsyncClient
from django.test.utils import CaptureQueriesContext

from aimon_admin.accounts.models import User
from aimon_admin.approvals.inbox_filter import BAD_FILTER_TITLE
from aimon_admin.audit import chain, export
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_record
from aimon_admin.runtimes.models import AgentRuntime
from tests.audit.helpers import record_events
from tests.audit_pages.pages_support import logged_in
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db
JSONL = "/audit/events/export.jsonl"
CSV = "/audit/events/export.csv"


async def _chunks(response: StreamingHttpResponse) -> list[bytes]:
    return [chunk async for chunk in response.streaming_content]  # type: ignore[union-attr]


def streamed(response: StreamingHttpResponse) -> list[bytes]:
    """The body as the ASGI server would send it: chunk by chunk from the async iterator."""
    assert response.streaming
    assert response.is_async, "a sync iterator would be read whole into a list under ASGI"
    return async_to_sync(_chunks)(response)


def expected_lines(events: list[AuditEvent]) -> list[str]:
    return [
        json.dumps({**event.content(), "hash": event.hash}, ensure_ascii=False, sort_keys=True)
        for event in events
    ]


# --- The pure builders -----------------------------------------------------------------------


def test_a_json_line_is_the_hashed_content_plus_its_hash(runtime: AgentRuntime) -> None:
    # A2: what an outside verifier recomputes.
    [event] = record_events(1)
    line = export.jsonl_line(event.content(), event.hash)
    assert line.endswith("\n")
    assert line.count("\n") == 1
    record = json.loads(line)
    assert set(record) == {*chain.CONTENT_FIELDS, "hash"}
    stored_hash = record.pop("hash")
    assert chain.compute_hash(record) == stored_hash == event.hash
    assert "ünïcode ✓" in line  # not \\u-escaped
    assert (
        line == json.dumps({**event.content(), "hash": event.hash}, ensure_ascii=False, sort_keys=True) + "\n"
    )


def test_a_csv_row_has_every_column_and_canonical_details(runtime: AgentRuntime) -> None:
    [event] = record_events(1)
    rows = list(csv.reader(io.StringIO(export.csv_header() + export.csv_row(event.content(), event.hash))))
    assert rows[0] == [
        "seq", "created_at", "actor_id", "actor_label", "channel", "action", "level", "runtime_id",
        "session_key", "subject_type", "subject", "details", "request_id", "prev_hash", "hash",
    ]  # fmt: skip
    row = dict(zip(rows[0], rows[1], strict=True))
    assert row["seq"] == str(event.seq)
    assert row["actor_id"] == ""
    assert row["runtime_id"] == ""
    assert row["details"] == chain.canonical_json(event.details)
    assert row["hash"] == event.hash
    assert row["prev_hash"] == event.prev_hash
    assert row["created_at"] == event.content()["created_at"]


@pytest.mark.parametrize("subject", ['=HYPERLINK("http://x")', "+1", "-1", "@SUM(A1)", "\tx"])
def test_csv_cells_a_spreadsheet_would_run_as_formulas_are_defused(subject: str) -> None:
    content = dict.fromkeys(chain.CONTENT_FIELDS, "")
    content.update(subject=subject, details={}, seq=1)
    cells = export.csv_values(content, "h")
    assert cells[export.CSV_COLUMNS.index("subject")] == "'" + subject


# --- The views -------------------------------------------------------------------------------


@pytest.fixture
def ten_events(runtime: AgentRuntime) -> list[AuditEvent]:
    record_events(9, prefix="export")
    return list(AuditEvent.objects.order_by("seq"))


def test_the_jsonl_export_streams_every_event_in_chunks_and_verifies(
    auditor: User, ten_events: list[AuditEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "EXPORT_CHUNK_SIZE", 3)
    client = logged_in(auditor)
    everything = list(AuditEvent.objects.order_by("seq"))  # signing in added one
    response = client.get(JSONL)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    assert re.fullmatch(
        r'attachment; filename="audit-events-\d{8}T\d{6}Z\.jsonl"', response["Content-Disposition"]
    )
    with CaptureQueriesContext(connection) as queries:
        chunks = streamed(response)
    # One query per chunk of three, each a keyset range; never the whole table at once.
    reads = [q["sql"] for q in queries.captured_queries if "audit_auditevent" in q["sql"]]
    assert len(reads) == len(chunks) == -(-len(everything) // 3)
    assert all("LIMIT 3" in sql and "OFFSET" not in sql for sql in reads)
    lines = b"".join(chunks).decode().splitlines()
    assert lines == expected_lines(everything)
    parsed = [json.loads(line) for line in lines]
    assert (
        chain.verify_chain((None, {k: v for k, v in p.items() if k != "hash"}, p["hash"]) for p in parsed)
        is None
    )


def test_the_export_takes_the_logs_filters(
    auditor: User, ten_events: list[AuditEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "EXPORT_CHUNK_SIZE", 2)
    with transaction.atomic():
        other = audit_record(action=AuditAction.RULE_CREATED, actor=TEST_ACTOR, subject="deploy")
    client = logged_in(auditor)
    filtered = client.get(JSONL, {"action": "RUNTIME_SETTINGS_CHANGED"})
    lines = b"".join(streamed(filtered)).decode().splitlines()
    wanted = list(AuditEvent.objects.filter(action=AuditAction.RUNTIME_SETTINGS_CHANGED).order_by("seq"))
    assert len(wanted) == 9
    assert lines == expected_lines(wanted)
    only = b"".join(streamed(client.get(JSONL, {"subject": "deploy"}))).decode().splitlines()
    assert only == expected_lines([other])


def test_the_csv_export_streams_a_header_and_one_row_per_event(
    auditor: User, ten_events: list[AuditEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "EXPORT_CHUNK_SIZE", 4)
    client = logged_in(auditor)
    response = client.get(CSV, {"subject": "export-3"})
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].endswith('.csv"')
    rows = list(csv.reader(io.StringIO(b"".join(streamed(response)).decode())))
    event = AuditEvent.objects.get(subject="export-3")
    assert rows == [list(export.CSV_COLUMNS), export.csv_values(event.content(), event.hash)]


@pytest.mark.parametrize(("url", "query"), [(JSONL, "before=5"), (CSV, "level=LOUD"), (JSONL, "since=soon")])
def test_an_export_with_a_filter_it_cannot_read_is_a_400(auditor: User, url: str, query: str) -> None:
    response = logged_in(auditor).get(f"{url}?{query}")
    assert response.status_code == 400
    assert BAD_FILTER_TITLE in response.content.decode()


def test_events_written_during_an_export_are_left_out(
    auditor: User, ten_events: list[AuditEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "EXPORT_CHUNK_SIZE", 2)
    client = logged_in(auditor)
    before = list(AuditEvent.objects.order_by("seq"))
    response = client.get(JSONL)
    record_events(3, prefix="late")  # after the export began, before it was read
    assert b"".join(streamed(response)).decode().splitlines() == expected_lines(before)


def test_over_asgi_the_export_is_streamed_without_being_read_whole(
    auditor: User, ten_events: list[AuditEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ASGI handler iterates the async generator as it goes: Django warns when it has
    # to read a streaming body whole first, so no warning means no whole-body list.
    monkeypatch.setattr(export, "EXPORT_CHUNK_SIZE", 3)
    client = AsyncClient()
    client.force_login(auditor)
    everything = list(AuditEvent.objects.order_by("seq"))

    async def fetch() -> tuple[int, list[bytes]]:
        response = await client.get(JSONL)
        return response.status_code, [chunk async for chunk in response.streaming_content]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        status, chunks = async_to_sync(fetch)()
    assert status == 200
    assert len(chunks) > 1
    assert b"".join(chunks).decode().splitlines() == expected_lines(everything)
