"""Sign-in through an OpenID Connect provider in Chromium, against a real provider
(tests/accounts/oidc_kit.py): its own login form, the home of the role its groups give, a
change of groups taking effect at the next sign-in, sign-out, and a tampered or expired ID
token refused on the sign-in page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts import oidc
from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from tests.accounts.oidc_kit import PROVIDER_NAME, Provider, oidc_settings, running_provider
from tests.browser.conftest import Shot, main_page

AT_PROVIDER = "provider-pass 9Xq!"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory, live_server: LiveServer) -> Iterator[Provider]:
    callback = f"{live_server.url}/accounts/oidc/callback/"
    with running_provider(tmp_path_factory.mktemp("oidc-browser"), [callback]) as running:
        yield running


@pytest.fixture
def oidc_on(settings: Any, provider: Provider) -> Provider:
    from django.core.cache import cache

    oidc_settings(settings, provider.issuer)
    provider.id_token("normal")
    cache.clear()
    return provider


def through_provider(page: Page, live_server: LiveServer, login: str | None) -> None:
    """From the sign-in page, the button, and (if the provider asks) its own login form."""
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}").click()
    if login is not None:
        expect(page.get_by_role("heading", name="Test provider")).to_be_visible()
        page.get_by_label("Provider username").fill(login)
        page.get_by_label("Provider password").fill(AT_PROVIDER)
        page.get_by_role("button", name="Sign in at the provider").click()


def test_sign_in_through_the_provider_lands_on_the_roles_home_and_follows_its_groups(
    live_server: LiveServer, page: Page, oidc_on: Provider, shot: Shot
) -> None:
    oidc_on.set_user("maya", AT_PROVIDER, ["aimon-operators"])
    page.goto(f"{live_server.url}/accounts/login/")
    main_page(page, shot, "sign-in with the provider's button")
    through_provider(page, live_server, "maya")
    expect(page).to_have_url(f"{live_server.url}/")
    # The operator's home: people and access among its sections.
    expect(page.locator('[data-home-section="people"]')).to_be_visible()
    shot(page, "operator home")
    assert User.objects.get(username="maya").roles == [Role.OPERATOR]

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{live_server.url}/accounts/login/")

    # Moved from the operators' group to the approvers' at the provider; the provider still
    # knows the browser, so the button brings them straight back, as an approver now.
    oidc_on.set_user("maya", AT_PROVIDER, ["aimon-approvers"])
    through_provider(page, live_server, login=None)
    expect(page).to_have_url(f"{live_server.url}/")
    expect(page.get_by_role("region", name="Requests to answer")).to_be_visible()
    expect(page.locator('[data-home-section="people"]')).to_have_count(0)
    shot(page, "approver home")
    assert User.objects.get(username="maya").roles == [Role.APPROVER]
    # What an operator's page needs is gone with the role.
    response = page.goto(f"{live_server.url}/accounts/people/")
    assert response is not None
    assert response.status == 403


@pytest.mark.parametrize("mode", ["tampered", "expired"])
def test_a_tampered_or_expired_id_token_leaves_the_person_signed_out_and_told(
    live_server: LiveServer, page: Page, oidc_on: Provider, mode: str, shot: Shot
) -> None:
    oidc_on.set_user("noor", AT_PROVIDER, ["aimon-approvers"])
    oidc_on.id_token(mode)
    through_provider(page, live_server, "noor")
    expect(page).to_have_url(f"{live_server.url}/accounts/login/")
    expect(page.get_by_text(oidc.UNVERIFIED_MESSAGE.format(provider=PROVIDER_NAME))).to_be_visible()
    # The password form is still there, and nobody was signed in or created.
    expect(page.locator("input[name=password]")).to_be_visible()
    main_page(page, shot, f"{mode} token refused")
    assert not User.objects.filter(username__startswith="noor").exists()
    page.goto(f"{live_server.url}/")
    expect(page).to_have_url(f"{live_server.url}/accounts/login/?next=/")
