"""Help: the product serves its own documentation, docs/*.md, at /help/, so the help links
on its pages stay inside it; the pages leave out the rule ids (docs/rules.md) that the
documents keep for readers of the code. The first page starts each reader where their
roles do: a quick start per role, its links pages that role opens."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from django.template import Context, Template
from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import ROLE_PERMISSIONS, Role
from aimon_admin.core.help import CODE_READERS, PAGES, github_slug, help_page_html
from aimon_admin.navigation import QUICK_STARTS

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
HELP_LINK = re.compile(r'{%\s*help_link\s+"([^"]+)"\s+"([^"]+)"')
RULE_NUMBER = re.compile(r"\b[TSUAPG]\d{1,2}\b(?!-compatible)")  # S3-compatible storage is no rule


def headings(filename: str) -> set[str]:
    text = re.sub(r"^```.*?^```", "", (ROOT / "docs" / filename).read_text(), flags=re.M | re.S)
    return {github_slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M)}


@pytest.mark.parametrize("path", ["/help/", "/help/concepts/", "/help/api/", "/help/operations/"])
def test_every_document_is_a_page_for_everyone(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<nav class="tabs" aria-label="Documentation">' in html
    assert 'aria-current="page"' in html


def test_a_name_that_is_no_document_is_a_404(client: Client) -> None:
    assert client.get("/help/secrets/").status_code == 404
    assert client.get("/help/README/").status_code == 404


def test_links_between_documents_stay_on_the_help_pages() -> None:
    _title, body = help_page_html("operations")
    hrefs = re.findall(r'href="([^"]*)"', body)
    assert "/help/concepts/" in hrefs
    assert "/help/api/" in hrefs
    # The README is not served: its link keeps its words and loses the address.
    assert all(href.startswith(("/help/", "#")) for href in hrefs), hrefs
    _title, api = help_page_html("api")
    assert '<a href="/help/concepts/#what-a-runtime-relays">' in api
    assert 'id="what-a-runtime-relays"' in help_page_html("concepts")[1]


def test_the_pages_leave_out_rule_numbers_and_lines_for_code_readers() -> None:
    source = (ROOT / "docs" / "concepts.md").read_text()
    assert "(T1, T4)" in source  # the document keeps them for readers of the code
    assert CODE_READERS in source
    for name in PAGES:
        _title, body = help_page_html(name)
        prose = re.sub(r"<pre.*?</pre>", "", body, flags=re.S)
        assert RULE_NUMBER.findall(prose) == [], name
        assert "rule names in brackets" not in prose


def test_a_code_in_the_text_is_marked_as_one() -> None:
    _title, body = help_page_html("concepts")
    assert '<code class="enum-code">READ_ONLY</code>' in body
    assert '<code class="enum-code">MUTATING</code>' in body
    assert "<code>readOnlyHint</code>" in body  # not one of the product's codes


def test_tables_scroll_in_their_own_region_and_code_blocks_are_focusable() -> None:
    _title, body = help_page_html("concepts")
    assert '<div class="table-wrap" role="region" aria-label="Table" tabindex="0"><table>' in body
    _title, api = help_page_html("api")
    assert '<pre class="json" tabindex="0"><code' in api


def test_the_help_link_tag_points_at_a_section() -> None:
    html = Template('{% load ui %}{% help_link "concepts" "skill-rules" "More on skill rules" %}').render(
        Context()
    )
    assert html == '<a class="help-link" href="/help/concepts/#skill-rules">More on skill rules</a>'


def test_every_help_link_in_a_template_names_a_section_that_exists() -> None:
    links = [
        (template.relative_to(TEMPLATES).as_posix(), page, anchor)
        for template in TEMPLATES.rglob("*.html")
        for page, anchor in HELP_LINK.findall(template.read_text())
    ]
    assert len(links) >= 5
    missing = [link for link in links if link[1] not in PAGES or link[2] not in headings(PAGES[link[1]])]
    assert missing == []


# --- The first page: a quick start per role ---------------------------------------------------


def _first_page(client: Client, user: object | None = None) -> str:
    if user is not None:
        client.force_login(user)
    response = client.get("/help/")
    assert response.status_code == 200
    return response.content.decode()


def _quick_start_links(html: str) -> list[str]:
    sections = re.findall(r'<section class="quick-start".*?</section>', html, re.S)
    return [href for section in sections for href in re.findall(r'<li><a href="([^"]+)">', section)]


@pytest.mark.parametrize(
    ("role", "title", "links"),
    [
        (
            Role.APPROVER,
            "Approver: where to start",
            ["/approvals/", "/approvals/sessions/", "/notifications/"],
        ),
        (
            Role.OPERATOR,
            "Operator: where to start",
            ["/runtimes/", "/registry/servers/", "/approvals/rules/"],
        ),
        (Role.AUDITOR, "Auditor: where to start", ["/audit/", "/audit/events/", "/audit/escalations/"]),
    ],
)
def test_each_role_sees_its_quick_start_and_every_link_opens_for_it(
    client: Client, make_user: Callable[..., User], role: str, title: str, links: list[str]
) -> None:
    user = make_user(f"only-{role}", role)
    html = _first_page(client, user)
    assert html.count('<section class="quick-start"') == 1
    assert f">{title}</h2>" in html
    assert _quick_start_links(html) == links
    for link in links:
        assert client.get(link).status_code == 200, link


def test_someone_with_several_roles_sees_each_quick_start(
    client: Client, make_user: Callable[..., User]
) -> None:
    html = _first_page(client, make_user("both", Role.APPROVER, Role.AUDITOR))
    assert "Approver: where to start" in html
    assert "Auditor: where to start" in html
    assert "Operator: where to start" not in html


def test_every_quick_start_step_is_a_page_its_role_opens() -> None:
    for start in QUICK_STARTS:
        granted = set(ROLE_PERMISSIONS[start.role])
        assert len(start.steps) == 3, start.role
        assert all(item.permission in granted for item, _what in start.steps), start.role
        assert set(start.documents) <= set(PAGES), start.role


def test_a_pure_approver_is_not_pushed_the_production_guide(
    client: Client, make_user: Callable[..., User]
) -> None:
    html = _first_page(client, make_user("only-approver", Role.APPROVER))
    tabs = re.search(r'<nav class="tabs".*?</nav>', html, re.S).group(0)  # type: ignore[union-attr]
    assert "/help/operations/" not in tabs
    assert "OpenAPI" not in tabs
    yours, others = html.split('id="other-documents"')
    assert '<a href="/help/concepts/">' in yours
    assert '<a href="/help/operations/">' not in yours
    # Still reachable: listed below, and the page itself opens.
    assert '<a href="/help/operations/">' in others
    assert client.get("/help/operations/").status_code == 200


def test_the_first_page_has_no_words_for_readers_of_the_repository(
    client: Client, make_user: Callable[..., User]
) -> None:
    for html in (_first_page(Client()), _first_page(client, make_user("op", Role.OPERATOR))):
        assert "Everything here is part of the repository" not in html
        assert "make screenshots" not in html
        assert "readers of the code" not in html
        # Every served document is listed, with its description.
        for name in PAGES:
            if name:
                assert f'<a href="/help/{name}/">' in html, name
        assert "the token-authenticated API agent runtimes call" in html


def test_signed_out_the_first_page_lists_every_document(client: Client) -> None:
    html = _first_page(client)
    assert '<section class="quick-start"' not in html
    assert "Sign in to see where to start for your role." in html
    assert 'id="other-documents"' not in html
