"""Tool rules in the browser (U1, U5): the preview follows the rule as it is typed (the tool
it names, its subject, the recent calls it would match), a bad rule is named before saving,
and a pre-approval is saved for one runtime, at 1280 and 390 px."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import RequestKind
from aimon_admin.approvals.models import ApprovalRequest, ToolRule
from aimon_admin.approvals.tool_policy import arguments_digest
from aimon_admin.approvals.tool_rule_grammar import TOOL_NAME_EMPTY
from aimon_admin.approvals.tool_rules import PRE_APPROVAL_NEEDS_RUNTIME
from aimon_admin.registry.services import local_tools_replace, tool_subject_set
from aimon_admin.runtimes.models import AgentRuntime
from tests.browser.conftest import LogIn, Shot, at_both_widths
from tests.conftest import TEST_ACTOR


def asked(runtime: AgentRuntime, command: str) -> None:
    arguments = {"command": command}
    ApprovalRequest.objects.create(
        kind=RequestKind.TOOL,
        runtime=runtime,
        tool="Bash",
        arguments=arguments,
        arguments_digest=arguments_digest(arguments),
        subject_argument="command",
        subject=command,
        expires_at=timezone.now() + dt.timedelta(minutes=5),
    )


@at_both_widths
def test_a_tool_rule_is_previewed_then_saved_as_a_pre_approval(
    live_server: LiveServer, page: Page, shot: Shot, log_in: LogIn, operator: User, runtime: AgentRuntime
) -> None:
    local_tools_replace(
        runtime=runtime,
        tools=[{"name": "Bash", "description": "shell", "side_effect_level": "MUTATING"}],
        actor=TEST_ACTOR,
    )
    tool_subject_set(server="", tool="Bash", argument="command", actor=TEST_ACTOR)
    for command in ("make nightly", "make nightly && curl evil", "ls"):
        asked(runtime, command)
    log_in(page, operator)
    page.goto(f"{live_server.url}/approvals/rules/")
    page.get_by_role("link", name="Add a tool rule").click()
    expect(page).to_have_url(f"{live_server.url}/approvals/rules/tools/add/")

    text = page.locator("input[name=tool-text]")
    preview = page.locator("#tool-rule-preview")
    text.press_sequentially("(make:*)", delay=10)
    expect(preview).to_contain_text(TOOL_NAME_EMPTY)
    text.fill("Bash(make:*)")
    expect(preview).to_contain_text("registered by runtime agent-one (writes, destructive, not idempotent)")
    expect(preview).to_contain_text("Its subject is the argument command.")
    expect(preview).to_contain_text("it would ask about 2")  # ASK: a deny-like match covers the chain
    page.locator("select[name=tool-action]").select_option("ALLOW")
    expect(preview).to_contain_text("it would allow 1.")
    expect(preview).to_contain_text("make nightly && curl evil")  # begins the same, not covered
    shot(page, "preview")

    page.get_by_label("Pre-approval: only this runtime's unattended runs").check()
    page.get_by_role("button", name="Save tool rule").click()
    expect(page.locator("#id_tool-unattended_error")).to_contain_text(PRE_APPROVAL_NEEDS_RUNTIME)
    assert not ToolRule.objects.exists()

    page.locator("select[name=tool-runtime]").select_option("agent-one")
    page.get_by_role("button", name="Save tool rule").click()
    expect(page.locator("#tool-rules table")).to_contain_text("Bash(make:*)")
    expect(page.locator("#tool-rules table")).to_contain_text(
        "Pre-approval: answers only agent-one's unattended runs."
    )
    rule = ToolRule.objects.get()
    assert (rule.pattern, rule.action, rule.unattended, rule.runtime) == ("make:*", "ALLOW", True, runtime)
    # Nothing wider than the page (390 px included).
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "saved")
