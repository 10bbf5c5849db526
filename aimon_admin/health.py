"""Health and readiness probes for load balancers and orchestrators.

`GET /healthz` says the process answers and touches nothing else. `GET /readyz` runs the
checks that decide whether this node can serve: the database, the migrations applied, the
audit signing key (A4), and Redis and a Celery worker where the settings use them. Both
answer JSON to anyone (no session, no sign-in): they take the runtime API's short path
through the middleware (settings.PROBE_PATHS).

The checks are django-health-check's (its database, Redis and Celery ping checks, and its
runner, which times each one and bounds it by its timeout), plus two of ours. Its own view
is not used: it answers 500 rather than 503, and its JSON names each check by its repr and
carries no timing. What a failure says is a short summary (`connection refused`, `timed
out`), never an address, a URL or a password: the answer is public.

Wiring, not an app: it reads the database, Redis, Celery and the audit key, so it sits
beside the URL configuration, above every app.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from concurrent.futures import ThreadPoolExecutor
from functools import cache, partial

from celery import Celery
from django.conf import settings
from django.db import DatabaseError, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.http import HttpRequest, JsonResponse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET
from health_check import checks
from health_check.base import HealthCheck, HealthCheckResult
from health_check.contrib.celery import Ping
from health_check.contrib.redis import Redis
from health_check.exceptions import ServiceUnavailable
from redis.asyncio import Redis as RedisClient

from aimon_admin import celery_app
from aimon_admin.audit.signing import SigningKeyError, key_path, read_private_key
from aimon_admin.core.plurals import Counted, counted

logger = logging.getLogger(__name__)

# Each check's own budget: a probe answers within about this (the runner adds a second).
CHECK_TIMEOUT = datetime.timedelta(seconds=2)
CELERY_PING_TIMEOUT = datetime.timedelta(seconds=1)
READY = "ok"
NOT_READY = "unavailable"
PASSED = "ok"
FAILED = "failed"

UNREACHABLE = "unreachable"
CONNECTION_REFUSED = "connection refused"
TIMED_OUT = "timed out"
# The breaker in front of the pool (aimon_admin/core/backends/postgresql) refuses at once.
DATABASE_REFUSED_AT_ONCE = "unreachable a moment ago; tried again within a second"
# What a database or broker error says, read for these words (lower case) and summarised.
_SUMMARIES = (
    ("connection refused", CONNECTION_REFUSED),
    ("timed out", TIMED_OUT),
    ("timeout", TIMED_OUT),
    ("couldn't get a connection", TIMED_OUT),
    ("authentication failed", "authentication failed"),
    ("refused at once", DATABASE_REFUSED_AT_ONCE),
    ("does not exist", "database does not exist"),
)
KEY_NOT_CONFIGURED = "no key configured (AIMON_AUDIT_SIGNING_KEY)"
KEY_FILE_MISSING = "the key file does not exist"
KEY_FILE_UNUSABLE = "the key file cannot be used"
MIGRATIONS_PENDING: Counted = ("{count} migration not applied", "{count} migrations not applied")


def summary(error: BaseException) -> str:
    """A few words for what went wrong, from the error and its causes; never their text."""
    seen: BaseException | None = error
    texts = []
    while seen is not None and len(texts) < 10:
        texts.append(f"{type(seen).__name__} {seen}".lower())
        seen = seen.__cause__ or seen.__context__
    for words, said in _SUMMARIES:
        if any(words in text for text in texts):
            return said
    return UNREACHABLE


@dataclasses.dataclass
class Database(checks.Database):
    """django-health-check's SELECT 1, its failure summarised (its own text keeps part of
    the driver's message, which may name the server)."""

    timeout: datetime.timedelta = dataclasses.field(default=CHECK_TIMEOUT, repr=False)

    def run(self) -> None:
        try:
            super().run()
        except ServiceUnavailable as exc:
            raise ServiceUnavailable(summary(exc.__cause__ or exc)) from exc


@cache
def migrations_on_disk() -> MigrationLoader:
    """The migration files, read once per process: they change only with a new release."""
    return MigrationLoader(None, ignore_no_migrations=True)


@dataclasses.dataclass
class MigrationsApplied(HealthCheck):
    """Every migration this release ships is recorded as applied in the database."""

    alias: str = "default"
    timeout: datetime.timedelta = dataclasses.field(default=CHECK_TIMEOUT, repr=False)

    def run(self) -> None:
        loader = migrations_on_disk()
        connection = connections[self.alias]
        try:
            with connection.temporary_connection():
                applied = set(MigrationRecorder(connection).applied_migrations())
        except DatabaseError as exc:
            raise ServiceUnavailable(summary(exc)) from exc
        pending = [
            key
            for key in loader.graph.nodes
            if key not in applied
            and not (key in loader.replacements and set(loader.replacements[key].replaces) <= applied)
        ]
        if pending:
            raise ServiceUnavailable(counted(MIGRATIONS_PENDING, len(pending)))


@dataclasses.dataclass
class AuditSigningKey(HealthCheck):
    """The audit checkpoints' signing key (A4) is configured, exists and loads."""

    timeout: datetime.timedelta = dataclasses.field(default=CHECK_TIMEOUT, repr=False)

    def run(self) -> None:
        path = key_path()
        if path is None:
            raise ServiceUnavailable(KEY_NOT_CONFIGURED)
        try:
            read_private_key(path)
        except SigningKeyError as exc:
            raise ServiceUnavailable(KEY_FILE_UNUSABLE if path.exists() else KEY_FILE_MISSING) from exc


def redis_check(url: str) -> Redis:
    wait = CHECK_TIMEOUT.total_seconds()
    client = partial(RedisClient.from_url, url, socket_connect_timeout=wait, socket_timeout=wait)
    return Redis(client_factory=client)


def celery_check(app: Celery) -> Ping:
    # limit=1: answered by the first worker that replies, not after the whole timeout.
    return Ping(app=app, timeout=CELERY_PING_TIMEOUT, limit=1)


def readiness_checks() -> dict[str, HealthCheck]:
    """The checks that apply to this node's settings, by the name the answer gives each."""
    found: dict[str, HealthCheck] = {
        "database": Database(),
        "migrations": MigrationsApplied(),
        "audit_signing_key": AuditSigningKey(),
    }
    if settings.REDIS_URL:
        found["redis"] = redis_check(settings.REDIS_URL)
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        found["celery"] = celery_check(celery_app)
    return found


def check_result(result: HealthCheckResult) -> dict[str, object]:
    """One check's part of the answer: passed or failed, how long it took, and why it failed."""
    entry: dict[str, object] = {
        "status": FAILED if result.error else PASSED,
        "ms": round(result.time_taken * 1000, 1),
    }
    if result.error is not None:
        # Ours are summaries; the library's (Redis, Celery) are constants, its catch-all
        # "unknown error" (it logs the exception itself).
        entry["error"] = str(result.error.message)
    return entry


# The threads the checks run in, for the life of the process. Not the event loop's own: under
# WSGI each request's loop is closed with `asyncio.run`, which waits for every thread of its
# executor, so a check still blocked past its timeout (a Celery ping retrying a broker that
# is down, for seconds) held the answer with it. Here it holds only its thread; while all
# are busy, a check waits its turn within its own timeout, and fails if that passes.
_CHECK_THREADS = ThreadPoolExecutor(max_workers=10, thread_name_prefix="aimon-readyz")


async def run_checks(named: dict[str, HealthCheck]) -> dict[str, dict[str, object]]:
    """Run the checks side by side; each answer's entry by name, in the order given."""
    results = await asyncio.gather(*(check.get_result(_CHECK_THREADS) for check in named.values()))
    return {name: check_result(result) for name, result in zip(named, results, strict=True)}


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. Nothing else is touched, the database least of all."""
    response = JsonResponse({"status": READY})
    add_never_cache_headers(response)
    return response


@require_GET
async def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when every check passes, 503 naming each check otherwise."""
    results = await run_checks(readiness_checks())
    failed = {name: entry["error"] for name, entry in results.items() if entry["status"] == FAILED}
    ready = not failed
    if failed:
        # One line, the answer's own words: the library's warning (a traceback per failed
        # check per probe) is turned off in settings.LOGGING.
        logger.warning("not ready: %s", "; ".join(f"{name}: {error}" for name, error in failed.items()))
    body = {"status": READY if ready else NOT_READY, "checks": results}
    response = JsonResponse(body, status=200 if ready else 503)
    add_never_cache_headers(response)
    # Logged above in its own words; Django would add an ERROR line for every 503 probe.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response
