"""Operator pages for runtimes, for every role: full pages, htmx fragments, refusals."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.services import token_issue
from aimon_admin.runtimes.tokens import token_hash
from aimon_admin.runtimes.views import TOKEN_ALREADY_SHOWN_MESSAGE
from tests.accounts.factories import logged_in
from tests.conftest import TEST_ACTOR
from tests.core.prg_support import assert_invalid_post_redirects_and_reloads

pytestmark = pytest.mark.django_db

SETTINGS = {"ceiling": "READ_ONLY", "exempt_at_or_below": "READ_ONLY", "owner": "", "description": ""}


# (path template, method) -> expected status for operator, auditor, approver.
PAGES = [
    ("/runtimes/", "get", 200, 200, 403),
    ("/runtimes/new/", "get", 200, 403, 403),
    ("/runtimes/agent-one/", "get", 200, 200, 403),
    ("/runtimes/agent-one/tokens/{token}/revoke/", "get", 200, 403, 403),
]


@pytest.mark.parametrize(("path", "method", "as_operator", "as_auditor", "as_approver"), PAGES)
def test_each_role_reaches_exactly_its_runtime_pages(
    runtime: AgentRuntime,
    operator: User,
    auditor: User,
    approver: User,
    path: str,
    method: str,
    as_operator: int,
    as_auditor: int,
    as_approver: int,
) -> None:
    token, _ = token_issue(runtime=runtime, actor=TEST_ACTOR)
    url = path.format(token=token.pk)
    for user, expected in ((operator, as_operator), (auditor, as_auditor), (approver, as_approver)):
        response = getattr(logged_in(user), method)(url)
        assert response.status_code == expected, (user.username, url)


@pytest.mark.parametrize("url", ["/", "/runtimes/", "/runtimes/new/", "/runtimes/agent-one/"])
def test_anonymous_visitors_are_sent_to_sign_in(runtime: AgentRuntime, client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize(
    ("url", "data"),
    [
        ("/runtimes/new/", {"name": "x", **SETTINGS}),
        ("/runtimes/agent-one/settings/", SETTINGS),
        ("/runtimes/agent-one/tokens/", {"label": "x"}),
    ],
)
def test_auditors_and_approvers_cannot_change_anything(
    runtime: AgentRuntime, auditor: User, approver: User, url: str, data: dict
) -> None:
    clients = [logged_in(user) for user in (auditor, approver)]
    before = AuditEvent.objects.count()
    for client in clients:
        assert client.post(url, data).status_code == 403
    assert AuditEvent.objects.count() == before
    runtime.refresh_from_db()
    assert runtime.ceiling == "MUTATING"


def test_auditor_cannot_revoke_a_token(runtime: AgentRuntime, auditor: User) -> None:
    token, _ = token_issue(runtime=runtime, actor=TEST_ACTOR)
    assert logged_in(auditor).post(f"/runtimes/agent-one/tokens/{token.pk}/revoke/").status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None


def test_unknown_runtime_is_404(operator: User) -> None:
    assert logged_in(operator).get("/runtimes/nope/").status_code == 404


def test_a_token_of_another_runtime_is_404_under_this_one(
    runtime: AgentRuntime, other_runtime: AgentRuntime, operator: User
) -> None:
    token, _ = token_issue(runtime=other_runtime, actor=TEST_ACTOR)
    response = logged_in(operator).post(f"/runtimes/agent-one/tokens/{token.pk}/revoke/")
    assert response.status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_operator_creates_a_runtime(operator: User) -> None:
    client = logged_in(operator)
    response = client.post(
        "/runtimes/new/",
        {"name": "builder", "ceiling": "MUTATING", "exempt_at_or_below": "MUTATING", "owner": "olivia"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/runtimes/builder/"
    runtime = AgentRuntime.objects.get(name="builder")
    assert runtime.owner == operator
    assert runtime.exempt_at_or_below == "MUTATING"
    assert AuditEvent.objects.get(action=AuditAction.RUNTIME_CREATED).actor == operator


def test_create_form_names_the_bad_field_and_a_reload_keeps_it(operator: User, runtime: AgentRuntime) -> None:
    # Post/redirect/get, what was typed and the errors kept.
    page = assert_invalid_post_redirects_and_reloads(
        logged_in(operator),
        "/runtimes/new/",
        {
            "name": "agent-one",
            "ceiling": "SOMETIMES",
            "exempt_at_or_below": "READ_ONLY",
            "description": "typed",
        },
        page="/runtimes/new/",
        shows=[
            "A runtime with this name already exists.",
            "Select a valid choice. SOMETIMES is not one of the available choices.",
            'value="agent-one"',
            "typed</textarea>",
        ],
    )
    assert page.count("A runtime with this name already exists.") == 1
    assert AgentRuntime.objects.count() == 1


def test_settings_saved_by_htmx_return_the_settings_fragment(runtime: AgentRuntime, operator: User) -> None:
    response = logged_in(operator).post(
        "/runtimes/agent-one/settings/", SETTINGS, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section class="card" id="runtime-settings">')
    assert "<html" not in html
    assert "Settings saved." in html
    runtime.refresh_from_db()
    assert runtime.ceiling == "READ_ONLY"
    assert AuditEvent.objects.get(action=AuditAction.RUNTIME_SETTINGS_CHANGED).channel == "BROWSER"


def test_invalid_settings_by_htmx_re_render_with_200_and_change_nothing(
    runtime: AgentRuntime, operator: User
) -> None:
    response = logged_in(operator).post(
        "/runtimes/agent-one/settings/",
        {**SETTINGS, "ceiling": "EVERYTHING"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    assert "EVERYTHING is not one of the available choices" in response.content.decode()
    runtime.refresh_from_db()
    assert runtime.ceiling == "MUTATING"


def test_settings_without_htmx_redirect_back_with_a_message(runtime: AgentRuntime, operator: User) -> None:
    client = logged_in(operator)
    response = client.post("/runtimes/agent-one/settings/", SETTINGS, follow=True)
    assert response.redirect_chain == [("/runtimes/agent-one/", 302)]
    assert "Settings saved." in response.content.decode()


def test_issued_token_is_shown_once_after_a_redirect_and_works(runtime: AgentRuntime, operator: User) -> None:
    # Post/redirect/get; the token waits server-side for one read.
    client = logged_in(operator)
    response = client.post("/runtimes/agent-one/tokens/", {"label": "host-1"})
    issued = RuntimeToken.objects.get(label="host-1")
    assert response.status_code == 302
    assert response["Location"] == f"/runtimes/agent-one/tokens/{issued.pk}/"
    assert "aimon_" not in response["Location"]
    shown = client.get(response["Location"])
    assert shown.status_code == 200
    assert shown["Cache-Control"] == "no-store"
    match = re.search(r'id="new-token"[^>]*value="(aimon_[^"]+)"', shown.content.decode())
    assert match
    token = match.group(1)
    assert issued.token_hash == token_hash(token)
    assert 'data-copy="new-token"' in shown.content.decode()
    detail = client.get("/runtimes/agent-one/").content.decode()
    assert token not in detail
    assert token[:12] in detail


def test_reloading_the_issued_token_page_issues_nothing_and_says_it_was_shown(
    runtime: AgentRuntime, operator: User
) -> None:
    # A reload once issued a second active token with the same label.
    client = logged_in(operator)
    location = client.post("/runtimes/agent-one/tokens/", {"label": "host-1"})["Location"]
    first = client.get(location).content.decode()
    (token,) = set(re.findall(r"aimon_[A-Za-z0-9_-]{20,}", first))
    again = client.get(location)
    assert again.status_code == 200
    page = again.content.decode()
    assert TOKEN_ALREADY_SHOWN_MESSAGE in page
    assert token not in page
    assert 'id="new-token"' not in page
    assert RuntimeToken.objects.filter(runtime=runtime).count() == 1


def test_an_issued_token_is_shown_only_in_the_session_that_issued_it(
    runtime: AgentRuntime, operator: User
) -> None:
    location = logged_in(operator).post("/runtimes/agent-one/tokens/", {"label": "host-1"})["Location"]
    page = logged_in(operator).get(location).content.decode()
    assert TOKEN_ALREADY_SHOWN_MESSAGE in page
    assert 'id="new-token"' not in page


@pytest.mark.parametrize("url", ["/runtimes/agent-one/tokens/", "/runtimes/agent-one/settings/"])
def test_a_get_on_a_form_address_goes_to_the_runtime_page_not_405(
    runtime: AgentRuntime, operator: User, url: str
) -> None:
    # Reloading an invalid form's page (or opening its address) is no 405.
    response = logged_in(operator).get(url)
    assert response.status_code == 302
    assert response["Location"] == "/runtimes/agent-one/"
    assert not RuntimeToken.objects.exists()


def test_an_invalid_token_form_is_shown_again_with_its_error_and_a_reload_keeps_it(
    runtime: AgentRuntime, operator: User
) -> None:
    # A reload once gave "405 Not possible this way" and lost the label.
    assert_invalid_post_redirects_and_reloads(
        logged_in(operator),
        "/runtimes/agent-one/tokens/",
        {"label": "x" * 101},
        page="/runtimes/agent-one/",
        shows=["at most 100 characters", f'value="{"x" * 101}"'],
    )
    assert not RuntimeToken.objects.exists()


def test_invalid_settings_without_htmx_are_shown_again_and_a_reload_keeps_them(
    runtime: AgentRuntime, operator: User
) -> None:
    # The settings form without htmx (no script), post/redirect/get.
    assert_invalid_post_redirects_and_reloads(
        logged_in(operator),
        "/runtimes/agent-one/settings/",
        {**SETTINGS, "ceiling": "EVERYTHING", "description": "kept"},
        page="/runtimes/agent-one/",
        shows=["kept</textarea>", "Select a valid choice. EVERYTHING is not one of the available choices."],
    )
    runtime.refresh_from_db()
    assert runtime.description != "kept"


def test_revoke_asks_for_confirmation_before_revoking(runtime: AgentRuntime, operator: User) -> None:
    token, _ = token_issue(runtime=runtime, actor=TEST_ACTOR, label="host-1")
    client = logged_in(operator)
    page = client.get(f"/runtimes/agent-one/tokens/{token.pk}/revoke/").content.decode()
    assert "will be refused from the moment you confirm" in page
    token.refresh_from_db()
    assert token.revoked_at is None
    response = client.post(f"/runtimes/agent-one/tokens/{token.pk}/revoke/", follow=True)
    assert "revoked. Requests that present it are refused from now on." in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_by == operator


def test_auditor_sees_settings_read_only(runtime: AgentRuntime, auditor: User) -> None:
    page = logged_in(auditor).get("/runtimes/agent-one/").content.decode()
    assert "Save settings" not in page
    assert "Issue token" not in page
    assert "Revoke…" not in page
    assert "MUTATING" in page


def test_operators_reach_the_agent_wide_approvals_from_the_runtime_page(
    runtime: AgentRuntime, operator: User, auditor: User
) -> None:
    # S10: a runtime page leads to Revoke agent-wide (operators and the owner).
    assert (
        'href="/approvals/agents/agent-one/"'
        in logged_in(operator).get("/runtimes/agent-one/").content.decode()
    )
    assert "/approvals/agents/" not in logged_in(auditor).get("/runtimes/agent-one/").content.decode()
