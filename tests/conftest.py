"""Shared fixtures: people in each role, runtimes and their API clients, services checks.

Tests that need a service this machine lacks (Redis, Chromium) skip with a line that
says so; with AIMON_REQUIRE_SERVICES=1 (as .ci/run sets) such a skip fails instead.
Tests marked `postgres` are deselected on the SQLite run (the PostgreSQL run has them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from celery._state import _set_task_join_will_block
from django.core.management.sql import emit_post_migrate_signal
from django.db import connection, transaction
from django.test import TransactionTestCase
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.accounts.services import user_create
from aimon_admin.approvals import rules
from aimon_admin.audit import triggers
from aimon_admin.audit.verification import checkpoint_forget
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_create, token_issue
from tests.fuzzing import load_profile

HYPOTHESIS_PROFILE = load_profile()  # before a test module builds its settings (tests/fuzzing.py)


def pytest_report_header() -> str:
    if HYPOTHESIS_PROFILE == "fuzz":
        return "property tests: profile 'fuzz' (a random seed, ten times the examples)"
    return "property tests: profile 'ci' (derandomized: the same examples every run)"


REQUIRE_SERVICES = os.environ.get("AIMON_REQUIRE_SERVICES") == "1"
TEST_ACTOR = Actor.system("pytest")
PASSWORD = "correct horse battery staple 42"


def skip_or_fail(reason: str) -> None:
    """Skip for a missing service, unless the run requires every service (CI)."""
    if REQUIRE_SERVICES:
        pytest.fail(f"{reason} (AIMON_REQUIRE_SERVICES=1 turns this skip into a failure)")
    pytest.skip(reason)


@pytest.hookimpl(trylast=True)  # after the folders' conftests have marked their tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each run keeps what belongs to it: `postgres` tests only in the PostgreSQL run, and
    `sqlite_run` tests (slow, and the same on any database) only in the SQLite run. The others
    are deselected, not skipped: a skip means a missing service."""
    from django.conf import settings

    other_run = "sqlite_run" if settings.DATABASES["default"]["ENGINE"].endswith("postgresql") else "postgres"
    keep, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker(other_run) else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


# Transactional tests empty every table between tests, the audit table included; the
# append-only triggers refuse that, so they step aside for exactly that flush.
_original_fixture_teardown = TransactionTestCase._fixture_teardown


def _fixture_teardown_with_audit_flush(self: TransactionTestCase) -> None:
    triggers.drop(connection)
    try:
        if connection.vendor == "postgresql" and self.available_apps is None and not self.serialized_rollback:
            _delete_every_row()
        else:
            _original_fixture_teardown(self)
    finally:
        triggers.install(connection)


def _delete_every_row() -> None:
    """Django's flush, by DELETE. On PostgreSQL its one TRUNCATE of every table costs ~0.3 s
    however few rows a test left (each table gets a new file); deleting them costs ~0.01 s.
    Django's foreign keys are deferred to the commit, so the order does not matter. Then, as
    the flush does, post_migrate puts back the content types and permissions."""
    tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
    with transaction.atomic(), connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")  # nosec B608 - Django's own table names
    emit_post_migrate_signal(0, False, connection.alias)


TransactionTestCase._fixture_teardown = _fixture_teardown_with_audit_flush


@pytest.fixture(autouse=True)
def celery_join_allowed() -> Iterator[None]:
    """Every test starts with Celery's "a result may be waited on here" flag as a fresh process
    has it. The flag is one per process, not per thread: an eager task queued while another
    thread queues one (the race tests answer, cancel and sweep from several threads at once,
    and each commit queues its notification task eagerly) can leave it set, after which a
    later test's `task.apply(...).get()` refuses with "Never call result.get() within a task!".
    The product never waits on a task's result."""
    _set_task_join_will_block(False)
    yield
    _set_task_join_will_block(False)


@pytest.fixture(autouse=True)
def fresh_rule_indexes() -> Iterator[None]:
    """Every test starts and ends without the process's cached skill and tool rule indexes.
    They are keyed by the rule set's version, and a rolled-back test gives its version number
    back: the next test's rules, at the same number, must not be judged by the last test's."""
    rules.rule_index_reset()  # resets the tool rule index too
    yield
    rules.rule_index_reset()


@pytest.fixture(autouse=True)
def no_checkpoint_outside_the_log() -> Iterator[None]:
    """The verification checkpoint's cache copy outlives each test's rolled-back database:
    every test starts and ends without one."""
    checkpoint_forget()
    yield
    checkpoint_forget()


@pytest.fixture
def make_user(db: None) -> Callable[..., User]:
    def make(username: str, *roles: str, password: str = PASSWORD) -> User:
        return user_create(username=username, password=password, roles=roles, actor=TEST_ACTOR)

    return make


@pytest.fixture
def operator(make_user: Callable[..., User]) -> User:
    return make_user("olivia", Role.OPERATOR)


@pytest.fixture
def approver(make_user: Callable[..., User]) -> User:
    return make_user("alice", Role.APPROVER)


@pytest.fixture
def other_approver(make_user: Callable[..., User]) -> User:
    return make_user("bob", Role.APPROVER)


@pytest.fixture
def auditor(make_user: Callable[..., User]) -> User:
    return make_user("audrey", Role.AUDITOR)


@pytest.fixture
def runtime(db: None) -> AgentRuntime:
    return runtime_create(name="agent-one", actor=TEST_ACTOR)


@pytest.fixture
def other_runtime(db: None) -> AgentRuntime:
    return runtime_create(name="agent-two", actor=TEST_ACTOR)


@pytest.fixture
def runtime_token(runtime: AgentRuntime) -> str:
    return token_issue(runtime=runtime, actor=TEST_ACTOR, label="tests")[1]


@pytest.fixture
def api(runtime_token: str) -> APIClient:
    """An API client authenticated as `runtime`."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {runtime_token}")
    return client


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A reachable Redis (database 15, flushed around the test), or a visible skip."""
    import redis

    url = os.environ.get("AIMON_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        skip_or_fail(f"Redis is not reachable at {url}: {exc}")
    client.flushdb()
    yield url
    client.flushdb()
    client.close()
