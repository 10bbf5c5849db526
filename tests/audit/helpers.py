"""Raw-SQL and writing helpers for the audit tests (tampering goes around the model on purpose)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading

from django.conf import settings
from django.db import connection, transaction

from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_record, audit_verify_chain
from aimon_admin.core.actors import Actor
from aimon_admin.core.context import Channel, bound
from tests.conftest import TEST_ACTOR


def record_events(count: int, *, prefix: str = "event") -> list[AuditEvent]:
    """Append `count` events through the one writer, each in its own transaction (A3).

    Channel and request id are bound here, so what earlier tests left bound never leaks in.
    """
    events = []
    for number in range(1, count + 1):
        with bound(channel=Channel.SYSTEM, request_id=f"{prefix}-request-{number}"), transaction.atomic():
            events.append(
                audit_record(
                    action=AuditAction.RUNTIME_SETTINGS_CHANGED,
                    actor=TEST_ACTOR,
                    subject_type="runtime",
                    subject=f"{prefix}-{number}",
                    details={"number": number, "changed": ["ceiling"], "note": "ünïcode ✓"},
                )
            )
    return events


def execute(sql: str, params: list[object] | tuple[object, ...] = ()) -> int:
    """Run one raw statement; return how many rows it touched."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def json_param() -> str:
    """The placeholder for a JSON text parameter: jsonb needs a cast on PostgreSQL."""
    return "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"


INSERT_COLUMNS = (
    "seq",
    "created_at",
    "actor_id",
    "actor_label",
    "channel",
    "action",
    "level",
    "runtime_id",
    "session_key",
    "subject_type",
    "subject",
    "details",
    "request_id",
    "prev_hash",
    "hash",
)


def event_row(event: AuditEvent, **overrides: object) -> dict[str, object]:
    """The columns of `event` as raw_insert() takes them, with some replaced."""
    row: dict[str, object] = {column: getattr(event, column) for column in INSERT_COLUMNS}
    row.update(overrides)
    return row


def raw_insert(row: dict[str, object]) -> int:
    """INSERT one audit row by raw SQL, around the model and audit_record(); return the row count.

    `row` holds every column of INSERT_COLUMNS (see event_row()).
    """
    values = dict(row)
    created_at = values["created_at"]
    assert isinstance(created_at, dt.datetime)
    values["created_at"] = connection.ops.adapt_datetimefield_value(created_at)
    if not isinstance(values["details"], str):
        values["details"] = json.dumps(values["details"])
    placeholders = ", ".join(json_param() if column == "details" else "%s" for column in INSERT_COLUMNS)
    return execute(
        f"INSERT INTO audit_auditevent ({', '.join(INSERT_COLUMNS)}) VALUES ({placeholders})",
        [values[column] for column in INSERT_COLUMNS],
    )


def database_for_new_process() -> str:
    """A DATABASE_URL through which another process sees what this (transactional) test committed."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"  # a file (aimon_admin/settings/test.py)
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def run_in_new_process(
    args: list[str], database_url: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `python <args>` from the project root against `database_url`, with the test settings."""
    env = dict(os.environ, DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="aimon_admin.settings.test")
    return subprocess.run(
        [sys.executable, *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_writers(threads: int, events_per_thread: int) -> list[BaseException]:
    """Start `threads` writers together, each appending events one transaction at a time."""
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def writer(number: int) -> None:
        actor = Actor.system(f"writer-{number}")
        try:
            start.wait(timeout=30)
            for index in range(events_per_thread):
                with transaction.atomic():
                    audit_record(
                        action=AuditAction.RUNTIME_SETTINGS_CHANGED,
                        actor=actor,
                        subject_type="writer",
                        subject=f"{number}:{index}",
                        details={"writer": number, "index": index},
                    )
        except BaseException as exc:  # reported by the test, never swallowed
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=writer, args=(number,)) for number in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not any(worker.is_alive() for worker in workers), "a writer hung"
    return errors


def assert_one_unforked_chain(expected_count: int, threads: int, events_per_thread: int) -> None:
    seqs = list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, expected_count + 1))
    assert AuditEvent.objects.values("prev_hash").distinct().count() == expected_count
    assert audit_verify_chain() == (expected_count, None)
    # Each writer's own events are in the order it wrote them, none lost.
    for number in range(threads):
        subjects = list(
            AuditEvent.objects.filter(actor_label=f"writer-{number}")
            .order_by("seq")
            .values_list("subject", flat=True)
        )
        assert subjects == [f"{number}:{index}" for index in range(events_per_thread)]
