"""No page shows a link its reader cannot follow: every link to the product on every page,
as each person who may open that page, opens for them (no 403, 404 or 405). The pages are
the sweep's (every route with its row in the authorization matrix, and the fuller states),
walked once with the matrix's world and once with nothing in it but the people, where the
empty states speak."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urldefrag, urlsplit

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from tests.accounts.factories import person
from tests.browser.sweep import Visit, enrich, left_out, post_only, visits_by_everyone, visits_for
from tests.security.test_authorization_matrix import EXPECTED, OK, ROUTES, World
from tests.security.test_authorization_matrix import world as matrix_world

world = matrix_world  # the matrix's world fixture

REFUSED = {403, 404, 405}


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def links_on(html: str, page: str) -> set[str]:
    """The page's links to the product's own pages (no anchors, static files or others' sites)."""
    parser = _Links()
    parser.feed(html)
    found = set()
    for href in parser.hrefs:
        href, _ = urldefrag(href)
        parts = urlsplit(href)
        if (
            not href
            or parts.scheme
            or parts.netloc
            or href.startswith(("mailto:", settings.STATIC_URL, "/static/"))
        ):
            continue
        found.add(href if href.startswith("/") else page.rsplit("/", 1)[0] + "/" + href)
    return found


def walk(visits: list[Visit], users: dict[str, User], *, at_least: int) -> list[str]:
    """Each visit's page, then every link on it as the same person; what did not open."""
    clients: dict[str, Client] = {}
    answered: dict[tuple[str, str], int] = {}
    problems = []
    for visit in visits:
        if visit.status != 200:
            continue
        if visit.who not in clients:
            clients[visit.who] = Client()
            if visit.who != "anonymous":
                clients[visit.who].force_login(users[visit.who])
        client = clients[visit.who]
        response = client.get(visit.path)
        assert response.status_code == 200, (visit, response.status_code)
        for link in sorted(links_on(response.content.decode(), visit.path)):
            key = (visit.who, link)
            if key not in answered:
                answered[key] = client.get(link).status_code
            if answered[key] in REFUSED:
                problems.append(f"{visit.key} ({visit.path}) as {visit.who} links to {link}: {answered[key]}")
    assert len(answered) >= at_least, f"the walk lost its links: {len(answered)}"
    return problems


@pytest.mark.sqlite_run
def test_every_link_on_every_page_opens_for_whoever_sees_it(world: World) -> None:
    visits = visits_for(world, *enrich(world))
    seen = {(visit.path, visit.who) for visit in visits}
    visits += [visit for visit in visits_by_everyone(world) if (visit.path, visit.who) not in seen]
    assert walk(visits, world.users, at_least=250) == []


@pytest.mark.sqlite_run
def test_no_empty_page_links_where_its_reader_cannot_go(db: None) -> None:
    """The same with nothing made yet but the people: what the empty states offer."""
    users = {
        "alice": person("alice", Role.APPROVER),
        "operator": person("olivia", Role.OPERATOR),
        "auditor": person("audrey", Role.AUDITOR),
    }
    visits = [
        Visit(route.key, reverse(route.name), who)
        for route in ROUTES
        if route.name and not route.parameters and not left_out(route.key) and not post_only(route)
        for who in users
        if EXPECTED[route.key].get[who] == OK
    ]
    assert walk(visits, users, at_least=60) == []
