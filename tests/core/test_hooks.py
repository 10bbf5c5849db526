"""core.hooks: approvals announces a request opened, closed or escalated from inside its
transaction. A listener in the transaction writes with it (what is owed commits with the
change or not at all); any other runs after the commit, and its failure never reaches the
change (P2: delivery never blocks a request, nothing lost)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import transaction

from aimon_admin.core import hooks

EVENT = "test-hooks-event"


@pytest.fixture
def heard() -> Iterator[list[str]]:
    calls: list[str] = []
    yield calls
    hooks._listeners.pop(EVENT, None)
    hooks._in_transaction.pop(EVENT, None)


@pytest.mark.django_db(transaction=True)
def test_a_listener_hears_only_what_committed(heard: list[str]) -> None:
    # P2: an announcement waits for the commit; a rolled-back change is never announced.
    hooks.listen(EVENT, heard.append)
    hooks.listen(EVENT, heard.append)  # registered once
    with transaction.atomic():
        hooks.announce_after_commit(EVENT, "kept")
        assert heard == []

    def failing_change() -> None:
        with transaction.atomic():
            hooks.announce_after_commit(EVENT, "rolled-back")
            raise RuntimeError("the change fails")

    with pytest.raises(RuntimeError):
        failing_change()
    assert heard == ["kept"]


@pytest.mark.django_db(transaction=True)
def test_a_failing_listener_is_logged_and_the_others_still_run(
    heard: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    # P2: requests are created and answered whatever the listeners do.
    def broken(subject: str) -> None:
        raise ConnectionError("the broker is down")

    hooks.listen(EVENT, broken)
    hooks.listen(EVENT, heard.append)
    with transaction.atomic():
        hooks.announce_after_commit(EVENT, "r-1")
    assert heard == ["r-1"]
    assert "could not send test-hooks-event for r-1 (the broker is down)" in caplog.text


def test_nobody_listening_registers_nothing(django_capture_on_commit_callbacks, db: None) -> None:  # type: ignore[no-untyped-def]
    with django_capture_on_commit_callbacks() as callbacks:
        hooks.announce_after_commit("nobody-listens", "r-1")
    assert callbacks == []


def test_in_production_a_listener_runs_off_the_request_thread(
    settings, django_capture_on_commit_callbacks, db: None
) -> None:  # type: ignore[no-untyped-def]
    # A broker that is down would hold the request for seconds: the request only hands over.
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.CELERY_TASK_ALWAYS_EAGER = False
    ran_on: list[str] = []
    release, done = threading.Event(), threading.Event()

    def blocked(subject_id: str) -> None:
        ran_on.append(threading.current_thread().name)
        release.wait(5)
        done.set()

    hooks.listen("test-hooks-blocked", blocked)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            hooks.announce_after_commit("test-hooks-blocked", "r-2")
        assert not done.is_set()  # the commit returned while the listener was still held
        release.set()
        assert done.wait(5)
        assert ran_on == ["aimon-hints"]
    finally:
        release.set()
        hooks._listeners.pop("test-hooks-blocked", None)


@pytest.mark.django_db(transaction=True)
def test_a_listener_in_the_transaction_writes_with_the_change_and_fails_it(heard: list[str]) -> None:
    # P2: what a change owes is written with it, so no outage after the commit can lose it.
    def record(subject_id: str) -> None:
        assert transaction.get_connection().in_atomic_block
        heard.append(subject_id)

    hooks.listen(EVENT, record, in_transaction=True)
    with transaction.atomic():
        hooks.announce_after_commit(EVENT, "r-1")
        assert heard == ["r-1"]  # at once, inside it

    def broken(subject_id: str) -> None:
        raise ConnectionError("the database is gone")

    hooks.listen(EVENT, broken, in_transaction=True)
    with pytest.raises(ConnectionError), transaction.atomic():
        hooks.announce_after_commit(EVENT, "r-2")
    # Outside a transaction its write could not commit with the change: refused.
    with pytest.raises(RuntimeError, match="announce it inside the transaction"):
        hooks.announce_after_commit(EVENT, "r-3")
    assert heard == ["r-1", "r-2"]
