"""The product's small template components (issue 8): one way to show a time.

`{% when value %}` renders `<time datetime="…" title="…">3 minutes ago</time>` (or
"in 4 minutes" for a time to come): relative text to read, the exact UTC time in ISO 8601
on hover and for machines. Every template that shows a time uses it, so no page shows a
bare relative time without the exact one (tests/browser/test_design.py pins that).
"""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince, timeuntil

register = template.Library()


def exact(value: datetime, *, precise: bool = False) -> str:
    """The exact time in UTC, ISO 8601 with a Z (microseconds when `precise`)."""
    utc = value.astimezone(UTC)
    return utc.isoformat(timespec="microseconds" if precise else "seconds").replace("+00:00", "Z")


def relative(value: datetime, now: datetime | None = None) -> str:
    """ "3 minutes ago" or "in 4 minutes"; within a minute, "less than a minute ago" (not
    Django's "0 minutes ago") or "in less than a minute"."""
    now = now or timezone.now()
    if abs((value - now).total_seconds()) < 60:
        return "in less than a minute" if value > now else "less than a minute ago"
    if value > now:
        return f"in {timeuntil(value, now)}"
    return f"{timesince(value, now)} ago"


@register.simple_tag
def when(
    value: datetime | None, precise: bool = False, default: str = "never", show: str = "relative"
) -> str:
    """A time, relative in the text and exact in the title; `default` when there is none.

    show="exact" shows the exact time as the text too (a point in time someone chose,
    as on the in-force page), in the same element.
    """
    if value is None:
        return default
    stamp = exact(value, precise=precise)
    text = stamp.replace("T", " ").replace("Z", " UTC") if show == "exact" else relative(value)
    return format_html('<time datetime="{}" title="{}">{}</time>', stamp, stamp, text)
