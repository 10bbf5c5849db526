"""The `page_links` filter: a form's error may name a page of the product, and the reader
gets a link to it; everything else in the text stays escaped."""

from __future__ import annotations

from aimon_admin.core.templatetags.ui import page_links


def test_an_address_of_a_page_becomes_a_link_and_the_rest_is_escaped() -> None:
    text = "Trust <its> claims first: /registry/servers/files/trust/"
    assert page_links(text) == (
        "Trust &lt;its&gt; claims first: "
        '<a href="/registry/servers/files/trust/">/registry/servers/files/trust/</a>'
    )


def test_what_is_no_page_of_the_product_stays_text() -> None:
    assert page_links("a path /no/such/page/ and a/b/ and //evil.example/x/") == (
        "a path /no/such/page/ and a/b/ and //evil.example/x/"
    )
    assert page_links('"/approvals/"') == "&quot;" + '<a href="/approvals/">/approvals/</a>' + "&quot;"
