"""A length of time in plain words (the escalation time on pages and in messages, P2)."""

from __future__ import annotations

import pytest

from aimon_admin.core.durations import duration_words


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "0 seconds"),
        (1, "1 second"),
        (90, "90 seconds"),
        (60, "1 minute"),
        (605, "10 minutes"),
        (3600, "1 hour"),
        (5400, "1 hour 30 minutes"),
        (86400, "1 day"),
        (90061, "1 day 1 hour"),
        (-5, "0 seconds"),
    ],
)
def test_duration_words(seconds: int, words: str) -> None:
    assert duration_words(seconds) == words
