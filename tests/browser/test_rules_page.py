"""The skill-rules page in the browser: the preview follows the pattern as it is typed, a bad
pattern is named before saving, a new rule is ASK, and an ALLOW for every skill is saved only
once its confirmation is ticked."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.approvals.models import SkillRule
from aimon_admin.approvals.policy import PATTERN_STARS_MESSAGE
from aimon_admin.approvals.rules import ALLOW_EVERYTHING_MESSAGE
from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.conftest import LogIn, Shot

pytestmark = pytest.mark.parametrize("device", ["desktop"])


def test_the_preview_follows_the_pattern_and_allow_everything_needs_a_tick(
    live_server: LiveServer, page: Page, shot: Shot, log_in: LogIn, operator: User, runtime: AgentRuntime
) -> None:
    request_create(
        RequestInput(runtime=runtime, skills=["deploy-prod", "deploy-dev", "notify"], session_id="s-1")
    )
    log_in(page, operator)
    page.goto(f"{live_server.url}/approvals/rules/")
    expect(page.locator("main form")).to_have_count(0)  # the list only: the form has a page of its own
    page.get_by_role("link", name="Add a skill rule").click()
    expect(page).to_have_url(f"{live_server.url}/approvals/rules/skills/add/")
    expect(page.locator("select[name=action]")).to_have_value("ASK")  # not ALLOW

    preview = page.locator("#pattern-preview")
    page.locator("input[name=pattern]").press_sequentially("deploy-*", delay=20)
    expect(preview).to_contain_text("matches 2 of the 3 skills seen so far")
    expect(preview).to_contain_text("deploy-dev, deploy-prod")
    page.locator("input[name=pattern]").fill("***")
    expect(preview).to_contain_text(PATTERN_STARS_MESSAGE.format(position=1))
    page.locator("input[name=pattern]").fill("*")
    expect(preview).to_contain_text("matches 3 of the 3 skills")
    expect(preview).to_contain_text("every skill, including those not seen yet")
    shot(page, "preview")

    page.locator("select[name=action]").select_option("ALLOW")
    page.get_by_role("button", name="Save rule").click()
    expect(page.locator("#id_confirm_everything_error")).to_have_text(
        ALLOW_EVERYTHING_MESSAGE.format(where=" of every runtime")
    )
    assert not SkillRule.objects.exists()
    page.get_by_label("Yes, allow every skill without asking anyone").check()
    page.get_by_role("button", name="Save rule").click()
    rule = SkillRule.objects.get()
    assert rule.pattern == "*"
    expect(page).to_have_url(f"{live_server.url}/approvals/rules/#rule-{rule.pk}")  # at the new rule
    saved = page.locator(f"#rule-{rule.pk}")
    expect(saved).to_contain_text("Allows every skill of every runtime without asking.")


def test_cancel_goes_back_to_the_list_and_saves_nothing(
    live_server: LiveServer, page: Page, log_in: LogIn, operator: User
) -> None:
    log_in(page, operator)
    page.goto(f"{live_server.url}/approvals/rules/skills/add/")
    page.locator("input[name=pattern]").fill("deploy-*")
    page.get_by_role("link", name="Cancel").click()
    expect(page).to_have_url(f"{live_server.url}/approvals/rules/")
    assert not SkillRule.objects.exists()
