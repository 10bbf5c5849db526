"""The home page and navigation per role; error pages."""

from __future__ import annotations

import pytest
from django.test import Client

from aimon_admin.accounts.models import User

pytestmark = pytest.mark.django_db


def nav_labels(client: Client) -> list[str]:
    import re

    html = client.get("/").content.decode()
    nav = re.search(r'<nav aria-label="Main".*?</nav>', html, re.S)
    assert nav
    return re.findall(r"<a [^>]*>([^<]+)</a>", nav.group(0))


OPERATOR_NAV = [
    "Home",
    "Inbox",
    "Sessions",
    "My notifications",
    "Runtimes",
    "Tools",
    "MCP servers",
    "Tools to review",
    "Rules",
    "Gate simulator",
    "Audit log",
    "Delivery log",
    "People",
    "Locked sign-ins",
    "Webhooks",
    "Documentation",
]
AUDITOR_NAV = [
    "Home",
    "Runtimes",
    "Tools",
    "MCP servers",
    "Tools to review",
    "Rules",
    "Gate simulator",
    "Audit log",
    "Delivery log",
    "Documentation",
]
APPROVER_NAV = ["Home", "Inbox", "Sessions", "My notifications", "Documentation"]


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [("operator", OPERATOR_NAV), ("auditor", AUDITOR_NAV), ("approver", APPROVER_NAV)],
)
def test_navigation_fits_the_role(request: pytest.FixtureRequest, fixture: str, expected: list[str]) -> None:
    user: User = request.getfixturevalue(fixture)
    client = Client()
    client.force_login(user)
    assert nav_labels(client) == expected


@pytest.mark.parametrize(
    ("fixture", "groups"),
    [
        ("operator", ["Approvals", "Registry", "Policy", "Audit", "Administration", "Help"]),
        ("auditor", ["Registry", "Policy", "Audit", "Help"]),
        ("approver", ["Approvals", "Help"]),
    ],
)
def test_navigation_is_grouped_by_job_and_shows_only_groups_with_a_page(
    request: pytest.FixtureRequest, fixture: str, groups: list[str]
) -> None:
    client = Client()
    client.force_login(request.getfixturevalue(fixture))
    import re

    html = client.get("/").content.decode()
    assert re.findall(r'<span class="nav-group-label" id="[^"]+">([^<]+)</span>', html) == groups


def test_a_user_without_a_role_is_told_to_ask_for_one(make_user) -> None:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(make_user("nobody"))
    assert "Your account has no role yet" in client.get("/").content.decode()


def test_unknown_pages_get_a_styled_404(operator: User, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = False
    client = Client()
    client.force_login(operator)
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "There is nothing here" in html
    assert "Request id:" in html
    assert "/static/css/app.css" in html


def test_a_form_without_csrf_token_gets_the_styled_403(operator: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    response = client.post("/runtimes/new/", {"name": "x"})
    assert response.status_code == 403
    html = response.content.decode()
    assert "The form had expired or was sent from another site" in html
    assert 'aria-label="Main"' in html


def test_the_500_page_needs_no_database(rf, settings) -> None:  # type: ignore[no-untyped-def]
    from aimon_admin.core.views import server_error

    response = server_error(rf.get("/anything"))
    assert response.status_code == 500
    assert "Nothing was changed" in response.content.decode()
