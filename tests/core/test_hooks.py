"""core.hooks: approvals announces a request opened or changed after its commit, and a
listener's failure never reaches the change (DESIGN P2: delivery never blocks a request)."""

from __future__ import annotations

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
    assert "a listener of test-hooks-event failed for r-1" in caplog.text


def test_nobody_listening_registers_nothing(django_capture_on_commit_callbacks, db: None) -> None:  # type: ignore[no-untyped-def]
    with django_capture_on_commit_callbacks() as callbacks:
        hooks.announce_after_commit("nobody-listens", "r-1")
    assert callbacks == []
