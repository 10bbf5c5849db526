"""Exported audit events: one JSON line or CSV row per event, as pure functions.

The JSON Lines form is what an outside verifier reads (`verify_audit --file`): each line
is exactly the content the chain hash covers (`AuditEvent.content()`) plus `hash`, so
`chain.compute_hash(line without "hash") == line["hash"]` and each line's `prev_hash` is
the hash of the line before it (for an unfiltered export).

The CSV form is for spreadsheets. It carries the same fields, `details` as canonical
JSON (chain.canonical_json), with one difference: a text cell that a spreadsheet would
run as a formula (it starts with = + - @, a tab or a carriage return) is prefixed with
a single quote. The text columns hold names a runtime chooses (skills, sessions), so
this keeps an export from running a runtime's formula on an auditor's machine; verify
from the JSON Lines export, which is never altered.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from typing import Any

from aimon_admin.audit import chain

CSV_COLUMNS = (*chain.CONTENT_FIELDS, "hash")
# Events read per query by a streamed export (one chunk held in memory at a time).
EXPORT_CHUNK_SIZE = 2000
# Cells that spreadsheets read as formulas (OWASP "CSV injection").
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# Columns whose text comes from callers; seq, ids, times, enums and hashes never start so.
_TEXT_COLUMNS = frozenset({"actor_label", "session_key", "subject_type", "subject", "request_id"})


def jsonl_record(content: Mapping[str, Any], hash_: str) -> dict[str, Any]:
    return {**content, "hash": hash_}


def jsonl_line(content: Mapping[str, Any], hash_: str) -> str:
    """One event as a JSON line (with its newline)."""
    return json.dumps(jsonl_record(content, hash_), ensure_ascii=False, sort_keys=True) + "\n"


def _cell(column: str, value: Any) -> str:
    if value is None:
        return ""
    if column == "details":
        return chain.canonical_json(value)
    text = str(value)
    if column in _TEXT_COLUMNS and text.startswith(_FORMULA_STARTS):
        return "'" + text
    return text


def csv_values(content: Mapping[str, Any], hash_: str) -> list[str]:
    """One event's cells, in CSV_COLUMNS order."""
    record = jsonl_record(content, hash_)
    return [_cell(column, record[column]) for column in CSV_COLUMNS]


def csv_line(values: list[str] | tuple[str, ...]) -> str:
    """One CSV row (RFC 4180 quoting, CRLF line end)."""
    buffer = io.StringIO()
    csv.writer(buffer).writerow(values)
    return buffer.getvalue()


def csv_header() -> str:
    return csv_line(CSV_COLUMNS)


def csv_row(content: Mapping[str, Any], hash_: str) -> str:
    return csv_line(csv_values(content, hash_))
