"""The product's small template components: one way to show a time, one way to show a code.

`{% when value %}` renders `<time datetime="…" title="…">3 minutes ago</time>` (or
"in 4 minutes" for a time to come): relative text to read, the exact UTC time in ISO 8601
on hover and for machines. `{% when value show='exact' %}` turns it round for pages where
the moment itself matters (the audit log, "in force at"): the exact UTC time to read, the
relative one on hover. Every template that shows a time uses it, and the tag's own
template, core/_when.html, is the only one that writes a <time> element
(tests/core/test_when_tag.py and tests/browser/test_design.py pin both).

`{% words tool.side_effect_level "level" %}` shows a stored code in plain words with the
code itself on hover: `<span class="badge badge-level" data-level="MUTATING"
title="MUTATING">Writes</span>` (a kind registered with a badge, see core.words), or a
plain <span title="…"> for `plain=True` and kinds without one. `code=True` adds the code
as a details line for operators, <code class="enum-code">MUTATING</code>: the only way a
page shows a bare code (tests/core/test_plain_words.py sweeps every page for others).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from django import template
from django.db import models
from django.urls import Resolver404, resolve, reverse
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince, timeuntil

from aimon_admin.core import words as words_registry
from aimon_admin.core.durations import duration_words

register = template.Library()

SHOW_RELATIVE = "relative"
SHOW_EXACT = "exact"


def exact(value: datetime, *, precise: bool = False) -> str:
    """The exact time in UTC, ISO 8601 with a Z (microseconds when `precise`)."""
    utc = value.astimezone(UTC)
    return utc.isoformat(timespec="microseconds" if precise else "seconds").replace("+00:00", "Z")


def exact_text(value: datetime, *, precise: bool = False) -> str:
    """The exact time to read, UTC said: "2026-11-30 13:49:08 UTC" (microseconds when `precise`)."""
    return exact(value, precise=precise).replace("T", " ").replace("Z", " UTC")


def relative(value: datetime, now: datetime | None = None) -> str:
    """ "3 minutes ago" or "in 4 minutes"; within a minute, "less than a minute ago" (not
    Django's "0 minutes ago") or "in less than a minute"."""
    now = now or timezone.now()
    if abs((value - now).total_seconds()) < 60:
        return "in less than a minute" if value > now else "less than a minute ago"
    if value > now:
        return f"in {timeuntil(value, now)}"
    return f"{timesince(value, now)} ago"


@register.inclusion_tag("core/_when.html")
def when(
    value: datetime | None, precise: bool = False, default: str = "never", show: str = SHOW_RELATIVE
) -> dict[str, Any]:
    """A time in a <time> element: relative text with the exact UTC time on hover, or with
    show="exact" the exact time as text and the relative one on hover; `default` (text)
    when there is no time. The datetime attribute is always the exact time, to the
    microsecond when `precise`."""
    if value is None:
        return {"default": default}
    stamp = exact(value, precise=precise)
    if show == SHOW_EXACT:
        return {"stamp": stamp, "text": exact_text(value, precise=precise), "title": relative(value)}
    return {"stamp": stamp, "text": relative(value), "title": stamp}


@register.simple_tag
def words(value: Any, kind: str = "", plain: bool = False, code: bool = False, default: str = "") -> str:
    """A code in plain words, the code on hover (and, with `code`, beside them as a details
    line). `value` is an enum member or a stored code of the registered `kind`; an empty one
    shows `default`. Built here rather than from a template: a tool list shows three per row."""
    if value is None or value == "":
        return default
    raw = str(value.value) if isinstance(value, models.Choices) else str(value)
    text = words_registry.words_for(value, kind)
    if kind == words_registry.ANY and text == raw:
        return raw  # not a code: the value as it is
    entry = words_registry.kind(kind) if kind else None
    if entry is not None and entry.badge and not plain:
        html = format_html(
            '<span class="badge badge-{}" data-{}="{}" title="{}">{}</span>',
            entry.badge,
            entry.data,
            raw,
            raw,
            text,
        )
    else:
        html = format_html('<span title="{}">{}</span>', raw, text)
    if code:
        html = format_html('{} <code class="enum-code">{}</code>', html, raw)
    return html


_PATH = re.compile(r"(?<![\w/])/[A-Za-z0-9_.~%-]+(?:/[A-Za-z0-9_.~%-]+)*/")


@register.filter
def page_links(text: object) -> SafeString:
    """`{{ error|page_links }}`: the text, escaped, with each address of a page of the product
    in it (one the URL configuration resolves) made a link to that page. A message written
    for a form's error can name where to mend the cause, and the reader can go there."""
    text, parts, last = str(text), [], 0
    for match in _PATH.finditer(text):
        try:
            resolve(match.group(0))
        except Resolver404:
            continue
        parts += [escape(text[last : match.start()]), format_html('<a href="{0}">{0}</a>', match.group(0))]
        last = match.end()
    parts.append(escape(text[last:]))
    return mark_safe("".join(parts))  # noqa: S308 # nosec B308 B703 - every piece escaped or format_html


@register.filter
def duration(seconds: int | float | None) -> str:
    """`{{ runtime.escalate_after_seconds|duration }}`: "10 minutes" (empty for None)."""
    return "" if seconds is None else duration_words(seconds)


@register.filter
def duration_to(start: datetime | None, end: datetime | None) -> str:
    """`{{ approval.created_at|duration_to:approval.escalated_at }}`: "10 minutes" (empty
    without both)."""
    if start is None or end is None:
        return ""
    return duration_words((end - start).total_seconds())


@register.simple_tag
def help_link(page: str, anchor: str, text: str) -> str:
    """A link to a section of the product's own documentation (core.help serves docs/ at
    /help/): `{% help_link "concepts" "skill-rules" "How rules decide" %}`. Every anchor a
    template names is checked against the document's headings (tests/core/test_help.py)."""
    url = reverse("core:help-page", args=[page])
    return format_html('<a class="help-link" href="{}#{}">{}</a>', url, anchor, text)
