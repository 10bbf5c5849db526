"""The main navigation marks at most one item as the current page (the Skill rules page once
marked two, Approvals at /approvals/ and Skill rules at /approvals/rules/), and it is the item
whose address the page is under most closely."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from aimon_admin.accounts.models import User
from tests.security.test_authorization_matrix import EXPECTED, OK, ROUTES, World, path_of
from tests.security.test_authorization_matrix import world as matrix_world

world = matrix_world

pytestmark = pytest.mark.django_db


def current_items(html: str) -> list[str]:
    nav = re.search(r'<nav aria-label="Main".*?</nav>', html, re.S)
    assert nav, "no main navigation"
    return re.findall(r'<a [^>]*aria-current="page"[^>]*>([^<]+)</a>', nav.group(0))


def page_of(user: User, path: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200, path
    return response.content.decode()


@pytest.mark.parametrize(
    ("path", "current"),
    [
        ("/", ["Home"]),
        ("/approvals/rules/", ["Rules"]),
        ("/approvals/", ["Inbox"]),
        ("/approvals/sessions/", ["Sessions"]),
        ("/registry/simulator/", ["Gate simulator"]),
        ("/registry/simulator/worklist/", ["Tools to review"]),
        ("/audit/events/", ["Audit log"]),
        ("/accounts/people/new/", ["People"]),
        ("/accounts/sign-ins/locked/", ["Locked sign-ins"]),
        ("/notifications/", ["My notifications"]),
        ("/notifications/deliveries/", ["My notifications"]),
        ("/notifications/webhooks/", ["Webhooks"]),
        ("/notifications/log/", ["Delivery log"]),
    ],
)
def test_the_page_marks_its_own_item_only(operator: User, path: str, current: list[str]) -> None:
    assert current_items(page_of(operator, path)) == current


def test_no_page_marks_two_items(world: World) -> None:
    operator = world.users["operator"]
    checked = 0
    for route in ROUTES:
        expect = EXPECTED.get(route.key)
        if expect is None or expect.get["operator"] != OK or route.key.startswith(("api", "^api", "admin:")):
            continue
        path = path_of(route, world)
        if path.startswith(("/api/", "/django-admin/")) or route.key in {
            "approvals:inbox-poll",
            "registry:server-sync-run",
        }:
            continue
        client = Client()
        client.force_login(operator)
        response = client.get(path)
        if response.streaming:  # a download
            continue
        html = response.content.decode()
        if '<nav aria-label="Main"' not in html:
            continue
        assert len(current_items(html)) <= 1, (path, current_items(html))
        checked += 1
    assert checked > 30
