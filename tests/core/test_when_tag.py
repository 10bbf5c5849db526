"""The one date component, `{% when %}`: relative text with the exact UTC time in ISO 8601 in
its title, or (show='exact') the exact time as text with the relative one in its title; the
datetime attribute is always the exact time. Its template is the only one that writes a
<time> element."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.template import Context, Template
from django.utils import timezone

from aimon_admin.core.templatetags.ui import exact, exact_text, relative

NOW = datetime(2026, 11, 30, 13, 49, 8, 123456, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
THE_TAGS_TEMPLATE = TEMPLATES / "core" / "_when.html"


def render(source: str, **context: object) -> str:
    return Template("{% load ui %}" + source).render(Context(context))


def test_relative_text_both_ways() -> None:
    assert relative(NOW - timedelta(minutes=3), NOW) == "3\xa0minutes ago"
    assert relative(NOW + timedelta(minutes=4, seconds=10), NOW) == "in 4\xa0minutes"
    assert relative(NOW - timedelta(seconds=5), NOW) == "less than a minute ago"
    assert relative(NOW + timedelta(seconds=30), NOW) == "in less than a minute"
    assert relative(NOW - timedelta(days=2, hours=3), NOW) == "2\xa0days, 3\xa0hours ago"


def test_the_exact_time_is_utc_iso_8601() -> None:
    assert exact(NOW) == "2026-11-30T13:49:08Z"
    assert exact(NOW, precise=True) == "2026-11-30T13:49:08.123456Z"
    berlin = NOW.astimezone(timezone.get_fixed_timezone(60))
    assert exact(berlin) == "2026-11-30T13:49:08Z"
    assert exact_text(berlin) == "2026-11-30 13:49:08 UTC"
    assert exact_text(NOW, precise=True) == "2026-11-30 13:49:08.123456 UTC"


def test_the_tag_renders_a_time_element_with_the_exact_time_on_hover() -> None:
    when = timezone.now() - timedelta(minutes=3)
    html = render("{% when value %}", value=when)
    stamp = exact(when)
    assert html == f'<time datetime="{stamp}" title="{stamp}">3\xa0minutes ago</time>'
    assert render("{% when value %}", value=None) == "never"
    assert render("{% when value default='—' %}", value=None) == "—"


def test_show_exact_turns_it_round_the_relative_time_on_hover() -> None:
    # The audit log reads the exact UTC time, with the relative one on hover.
    when = timezone.now() - timedelta(minutes=3)
    stamp = exact(when)
    text = exact_text(when)
    assert render("{% when value show='exact' %}", value=when) == (
        f'<time datetime="{stamp}" title="3\xa0minutes ago">{text}</time>'
    )
    precise = render("{% when value precise=True show='exact' %}", value=when)
    assert f'datetime="{exact(when, precise=True)}"' in precise
    assert f">{exact_text(when, precise=True)}</time>" in precise


def test_values_are_escaped() -> None:
    assert render("{% when value default=text %}", value=None, text="<b>") == "&lt;b&gt;"


def test_no_template_but_the_tags_own_writes_a_time_element() -> None:
    # One {% when %} tag; a hand-written <time> could leave out the exact time.
    assert "<time" in THE_TAGS_TEMPLATE.read_text()
    templates = [
        path
        for path in TEMPLATES.rglob("*.html")
        if path != THE_TAGS_TEMPLATE and re.search(r"<time\b", path.read_text())
    ]
    # Nor any Python string that starts one (format_html, mark_safe, an f-string).
    code = [
        path
        for path in (ROOT / "aimon_admin").rglob("*.py")
        if re.search(r"""['"]<time\b""", path.read_text())
    ]
    offenders = [str(path.relative_to(ROOT)) for path in templates + code]
    assert offenders == []
