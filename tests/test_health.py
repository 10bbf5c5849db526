"""The probes: /healthz (the process answers) and /readyz (the node can serve).

Each readiness check passes and fails against the real thing (a database, Redis, a Celery
worker, the key file); the answer's shape, its status, its public words (no address, URL or
password in them), and that neither probe asks anyone to sign in.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import dj_database_url
import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from django.db import connection, connections
from django.db.migrations.recorder import MigrationRecorder
from django.test import Client
from health_check.base import HealthCheck
from health_check.exceptions import ServiceUnavailable

from aimon_admin.audit import signing
from aimon_admin.core.plurals import counted
from aimon_admin.health import (
    CONNECTION_REFUSED,
    KEY_FILE_MISSING,
    KEY_FILE_UNUSABLE,
    KEY_NOT_CONFIGURED,
    MIGRATIONS_PENDING,
    AuditSigningKey,
    Database,
    MigrationsApplied,
    celery_check,
    redis_check,
    run_checks,
)
from tests.ports import free_port

PASSWORD = "pr0be-s3cret-pa55word"
GHOST = "ghost"


def outcome(check: HealthCheck) -> dict[str, object]:
    """The check run as /readyz runs it (the library's runner: timed, bounded), as its entry."""
    return asyncio.run(run_checks({"check": check}))["check"]


@dataclasses.dataclass
class Stuck(HealthCheck):
    """A service that never answers: its check blocks until the test lets it go."""

    released: threading.Event
    timeout = datetime.timedelta(seconds=0.2)

    def run(self) -> None:
        self.released.wait(60)


def test_a_check_stuck_past_its_timeout_fails_without_holding_the_answer() -> None:
    # Each request's event loop is closed by asyncio.run (under WSGI too), which waits for its
    # executor's threads: a stuck check on the loop's own executor held the answer until it
    # ended. Let go only 10 s from now, it must have been answered before.
    released = threading.Event()
    timer = threading.Timer(10, released.set)
    timer.start()
    try:
        entry = outcome(Stuck(released))
        assert not released.is_set(), "the answer waited for the stuck check's thread"
    finally:
        released.set()
        timer.cancel()
    assert (entry["status"], entry["error"]) == ("failed", "Timed out after 0.2 seconds")


@pytest.fixture
def signing_key(tmp_path: Path, settings) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path / "audit-signing-key.pem"
    signing.create_key(path)
    settings.AIMON_AUDIT_SIGNING_KEY = str(path)
    return path


@pytest.fixture
def unreachable_database(django_db_blocker) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A second database alias, outside the test database's isolation: PostgreSQL on a
    closed port, its URL carrying a password."""
    url = f"postgres://aimon:{PASSWORD}@127.0.0.1:{free_port()}/aimon"
    parsed = dj_database_url.parse(url)
    parsed["OPTIONS"] = {"connect_timeout": 2}
    configured = connections.configure_settings({"default": connections.settings["default"], GHOST: parsed})
    connections.settings[GHOST] = configured[GHOST]
    with django_db_blocker.unblock():
        yield GHOST
    del connections.settings[GHOST]  # its connections were the checks' threads', and closed


# --- /healthz ----------------------------------------------------------------------------------


def test_healthz_answers_anyone_without_touching_the_database() -> None:
    # No database fixture: any query here would fail the test.
    response = Client().get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})
    assert response["Content-Type"] == "application/json"
    assert "no-cache" in response["Cache-Control"]


def test_healthz_takes_the_short_path_no_session_cookie_no_csrf() -> None:
    response = Client().get("/healthz")
    assert "Set-Cookie" not in response
    assert "Content-Security-Policy" not in response  # the page middleware was skipped
    assert Client().post("/healthz").status_code == 405


# --- /readyz through the view -----------------------------------------------------------------


@pytest.mark.django_db
def test_readyz_under_make_runs_settings_checks_what_applies_and_is_200(signing_key: Path, settings) -> None:  # type: ignore[no-untyped-def]
    # make run: SQLite or any database, no Redis, tasks run eagerly: no Redis or worker check.
    settings.REDIS_URL = ""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    response = Client().get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert list(body["checks"]) == ["database", "migrations", "audit_signing_key"]
    for entry in body["checks"].values():
        assert entry["status"] == "ok"
        assert set(entry) == {"status", "ms"}
        assert isinstance(entry["ms"], float)
        assert 0 <= entry["ms"] < 5000
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.django_db
def test_readyz_checks_redis_when_it_is_configured(signing_key: Path, redis_url: str, settings) -> None:  # type: ignore[no-untyped-def]
    settings.REDIS_URL = redis_url
    settings.CELERY_TASK_ALWAYS_EAGER = True
    body = Client().get("/readyz").json()
    assert list(body["checks"]) == ["database", "migrations", "audit_signing_key", "redis"]
    assert body["status"] == "ok", body


@pytest.mark.django_db
def test_readyz_is_503_naming_the_failed_check_and_never_showing_its_url(signing_key: Path, settings) -> None:  # type: ignore[no-untyped-def]
    redis_port = free_port()
    settings.REDIS_URL = f"redis://:{PASSWORD}@127.0.0.1:{redis_port}/4"
    settings.CELERY_TASK_ALWAYS_EAGER = True
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["redis"]["status"] == "failed"
    assert body["checks"]["redis"]["error"] == "Unable to connect to Redis: Connection Error"
    assert {name for name, entry in body["checks"].items() if entry["status"] == "failed"} == {"redis"}
    text = response.content.decode()
    assert PASSWORD not in text
    assert str(redis_port) not in text
    assert "redis://" not in text


@pytest.mark.django_db
def test_readyz_without_the_signing_key_is_503_and_one_log_line(
    settings, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    settings.AIMON_AUDIT_SIGNING_KEY = ""
    settings.REDIS_URL = ""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    caplog.set_level(logging.INFO)
    response = Client().get("/readyz")
    # Its own words, once: not Django's ERROR for a 503 too, nor the library's traceback.
    logged = [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.name != "aimon.requests"]
    assert logged == [
        ("aimon_admin.health", "WARNING", f"not ready: audit_signing_key: {KEY_NOT_CONFIGURED}")
    ]
    assert response.status_code == 503
    assert response.json()["checks"]["audit_signing_key"] == {
        "status": "failed",
        "ms": response.json()["checks"]["audit_signing_key"]["ms"],
        "error": KEY_NOT_CONFIGURED,
    }


@pytest.mark.django_db
def test_the_probes_answer_json_to_the_anonymous_not_a_sign_in_redirect(signing_key: Path, settings) -> None:  # type: ignore[no-untyped-def]
    settings.REDIS_URL = ""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    client = Client()
    for path in ("/healthz", "/readyz"):
        response = client.get(path, HTTP_ACCEPT="text/html")
        assert response.status_code == 200, path
        assert response["Content-Type"] == "application/json", path
        assert "Location" not in response, path
    # Nor does a signed-out person's stale session cookie, or a bad token, change the answer.
    client.cookies["sessionid"] = "not-a-session"
    assert client.get("/readyz", HTTP_AUTHORIZATION="Bearer nonsense").status_code == 200


# --- Each check, passing and failing ----------------------------------------------------------


@pytest.mark.django_db
def test_the_database_check_passes_on_the_test_database() -> None:
    assert outcome(Database())["status"] == "ok"


def test_the_database_check_fails_on_a_closed_port_saying_so_without_the_url(
    unreachable_database: str,
) -> None:
    entry = outcome(Database(alias=unreachable_database))
    assert entry["status"] == "failed"
    assert entry["error"] == CONNECTION_REFUSED
    assert PASSWORD not in str(entry)


@pytest.mark.django_db
def test_the_migrations_check_passes_when_every_migration_is_applied() -> None:
    assert outcome(MigrationsApplied())["status"] == "ok"


@pytest.mark.django_db
def test_the_migrations_check_fails_on_an_unapplied_migration() -> None:
    # In the test's own transaction (rolled back after it), so the check runs on its thread.
    MigrationRecorder(connection).record_unapplied("audit", "0001_initial")
    with pytest.raises(ServiceUnavailable) as raised:
        MigrationsApplied().run()
    assert raised.value.message == "1 migration not applied"
    assert raised.value.message == counted(MIGRATIONS_PENDING, 1)


def test_the_migrations_check_fails_when_the_database_is_unreachable(unreachable_database: str) -> None:
    entry = outcome(MigrationsApplied(alias=unreachable_database))
    assert (entry["status"], entry["error"]) == ("failed", CONNECTION_REFUSED)


def test_the_signing_key_check_passes_with_the_key(signing_key: Path) -> None:
    assert outcome(AuditSigningKey())["status"] == "ok"


@pytest.mark.parametrize(
    ("content", "said"),
    [(None, KEY_FILE_MISSING), (b"not a key", KEY_FILE_UNUSABLE)],
    ids=["missing", "unusable"],
)
def test_the_signing_key_check_fails_without_a_usable_key_file(
    content: bytes | None, said: str, tmp_path: Path, settings
) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "secret-dir" / "key.pem"
    if content is not None:
        path.parent.mkdir()
        path.write_bytes(content)
    settings.AIMON_AUDIT_SIGNING_KEY = str(path)
    entry = outcome(AuditSigningKey())
    assert (entry["status"], entry["error"]) == ("failed", said)
    assert "secret-dir" not in str(entry)  # where the key lives is not the public's business


def test_the_signing_key_check_fails_when_no_key_is_configured(settings) -> None:  # type: ignore[no-untyped-def]
    settings.AIMON_AUDIT_SIGNING_KEY = ""
    assert outcome(AuditSigningKey())["error"] == KEY_NOT_CONFIGURED


def test_the_redis_check_passes_on_the_test_redis(redis_url: str) -> None:
    assert outcome(redis_check(redis_url))["status"] == "ok"


def test_the_redis_check_fails_on_a_closed_port(redis_url: str) -> None:
    entry = outcome(redis_check(f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"))
    assert entry["status"] == "failed"
    assert PASSWORD not in str(entry)


@pytest.fixture
def throwaway_celery(redis_url: str) -> Iterator[Celery]:
    """A Celery app of its own on the test Redis (never the product's: nothing of its queues)."""
    app = Celery("aimon-readyz-test", broker=redis_url, set_as_current=False)
    app.conf.broker_connection_retry_on_startup = True
    yield app
    app.close()


def test_the_celery_check_passes_when_a_worker_answers(throwaway_celery: Celery) -> None:
    with start_worker(throwaway_celery, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        entry = outcome(celery_check(throwaway_celery))
    assert entry["status"] == "ok", entry


def test_the_celery_check_fails_when_no_worker_answers(throwaway_celery: Celery) -> None:
    entry = outcome(celery_check(throwaway_celery))
    assert (entry["status"], entry["error"]) == ("failed", "Celery workers unavailable")


def test_the_celery_check_fails_when_its_broker_is_unreachable() -> None:
    app = Celery(
        "aimon-readyz-test", broker=f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0", set_as_current=False
    )
    try:
        entry = outcome(celery_check(app))
    finally:
        app.close()
    assert entry["status"] == "failed"
    assert PASSWORD not in str(entry)
