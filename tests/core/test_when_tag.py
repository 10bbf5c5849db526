"""The one date component, `{% when %}` (issue 8): relative text, the exact UTC time in ISO
8601 in its title and datetime attributes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.template import Context, Template
from django.utils import timezone

from aimon_admin.core.templatetags.ui import exact, relative

NOW = datetime(2026, 11, 30, 13, 49, 8, 123456, tzinfo=UTC)


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


def test_the_tag_renders_a_time_element_with_the_exact_time_on_hover() -> None:
    when = timezone.now() - timedelta(minutes=3)
    html = render("{% when value %}", value=when)
    stamp = exact(when)
    assert html == f'<time datetime="{stamp}" title="{stamp}">3\xa0minutes ago</time>'
    exact_html = render("{% when value show='exact' %}", value=NOW)
    assert (
        exact_html
        == '<time datetime="2026-11-30T13:49:08Z" title="2026-11-30T13:49:08Z">2026-11-30 13:49:08 UTC</time>'
    )
    assert render("{% when value %}", value=None) == "never"
    assert render("{% when value default='—' %}", value=None) == "—"
