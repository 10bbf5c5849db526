"""A length of time in plain words: "10 minutes", "1 hour 30 minutes", "90 seconds"."""

from __future__ import annotations

from aimon_admin.core.plurals import counted

_UNITS = (
    (86400, ("{count} day", "{count} days")),
    (3600, ("{count} hour", "{count} hours")),
    (60, ("{count} minute", "{count} minutes")),
)


def duration_words(seconds: int | float) -> str:
    """Whole days, hours and minutes (two parts at most); under two minutes that are not a
    whole minute, the seconds."""
    seconds = max(int(seconds), 0)
    if seconds < 120 and seconds % 60:
        return counted(("{count} second", "{count} seconds"), seconds)
    parts = []
    left = seconds
    for size, message in _UNITS:
        if left >= size:
            parts.append(counted(message, left // size))
            left %= size
    return " ".join(parts[:2]) or counted(("{count} second", "{count} seconds"), 0)
