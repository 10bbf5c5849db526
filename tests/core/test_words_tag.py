"""Plain words for codes: `{% words %}` shows a stored code as the words people read, the
code on hover, and (for operators, on request) as a details line; core.words holds the words
each app registers for its enums, one meaning per code within a kind."""

from __future__ import annotations

import pytest
from django.db import models
from django.template import Context, Template

from aimon_admin.core import words
from aimon_admin.core.choices import SideEffectLevel
from aimon_admin.registry.choices import GateReason


def render(source: str, **context: object) -> str:
    return Template("{% load ui %}" + source).render(Context(context))


def test_a_stored_code_shows_its_words_in_its_badge_with_the_code_on_hover() -> None:
    html = render('{% words value "level" %}', value="MUTATING")
    assert html == '<span class="badge badge-level" data-level="MUTATING" title="MUTATING">Writes</span>'


def test_the_three_axes_read_alike() -> None:
    got = [render('{% words v "level" %}', v=v) for v in ("READ_ONLY", "NON_DESTRUCTIVE", "NON_IDEMPOTENT")]
    assert [html.split(">")[1].split("<")[0] for html in got] == [
        "Read-only",
        "Not destructive",
        "Not idempotent",
    ]


def test_an_enum_member_needs_no_kind_and_reads_as_plain_text() -> None:
    html = render("{% words value %}", value=GateReason.ABOVE_CEILING)
    assert html == '<span title="ABOVE_CEILING">Above this runtime&#x27;s ceiling: hidden and refused</span>'
    assert "Asks every time: destructive" in render("{% words v %}", v=GateReason.DESTRUCTIVE_ALWAYS_ASKS)


def test_plain_drops_the_badge_and_code_adds_the_details_line() -> None:
    assert (
        render('{% words v "level" plain=True %}', v="READ_ONLY")
        == '<span title="READ_ONLY">Read-only</span>'
    )
    html = render('{% words v "level" code=True %}', v=SideEffectLevel.MUTATING)
    assert html.endswith('>Writes</span> <code class="enum-code">MUTATING</code>')


def test_a_sync_badge_keeps_its_code_where_its_style_reads_it() -> None:
    html = render('{% words v "sync" %}', v="FAILED")
    assert html == '<span class="badge badge-sync" data-status="FAILED" title="FAILED">Failed</span>'


def test_no_code_shows_the_default() -> None:
    assert render('{% words v "finding" default="—" %}', v="") == "—"
    assert render('{% words v "finding" %}', v=None) == ""


def test_a_code_nobody_registered_is_shown_as_it_is_for_the_page_sweep_to_find() -> None:
    assert render('{% words v "level" %}', v="SIDEWAYS").endswith(">SIDEWAYS</span>")
    assert words.words_for("SIDEWAYS") == "SIDEWAYS"
    assert words.words_for("MUTATING", "level") == "Writes"


def test_an_unknown_kind_is_an_error_not_a_silent_code() -> None:
    with pytest.raises(LookupError, match="nothing-such"):
        words.kind("nothing-such")


def test_a_code_with_two_meanings_in_one_kind_is_refused() -> None:
    class One(models.TextChoices):
        SESSION = "SESSION", "This session"

    class Other(models.TextChoices):
        SESSION = "SESSION", "Session"

    words.register("test-two-meanings", One)
    with pytest.raises(ValueError, match="SESSION means 'This session' and 'Session'"):
        words.register("test-two-meanings", Other)


def test_codes_in_stored_prose_read_as_words() -> None:
    assert words.in_words("undeclared: default MUTATING", "level") == "undeclared: default writes"
    assert (
        words.in_words(
            "destructiveHint true, but read-only implies non-destructive → NON_DESTRUCTIVE", "level"
        )
        == "destructiveHint true, but read-only implies non-destructive → not destructive"
    )
    assert words.in_words("MUTATING_X and XMUTATING stay", "level") == "MUTATING_X and XMUTATING stay"


def test_a_recorded_value_reads_as_words_where_it_is_a_code_with_one_meaning() -> None:
    # An audit event's details: a value may be a code of any kind, or no code at all.
    assert render('{% words v "any" %}', v="MUTATING") == '<span title="MUTATING">Writes</span>'
    assert render('{% words v "any" %}', v="agent-one") == "agent-one"
    assert render('{% words v "any" %}', v="<b>") == "&lt;b&gt;"
    assert words.words_for("SESSION", words.ANY) == "This session"
