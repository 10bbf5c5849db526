"""Tool rules on the rules page (U1, U5): the list, the form, its live preview and deletion,
for every role."""

from __future__ import annotations

import datetime as dt
import html

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals import rules, tool_rules
from aimon_admin.approvals.choices import RequestKind, RuleAction
from aimon_admin.approvals.models import ApprovalRequest, ToolRule
from aimon_admin.approvals.rule_views import NO_SUBJECT_FLAG, TOOL_PREVIEW_EMPTY_MESSAGE
from aimon_admin.approvals.tool_policy import arguments_digest
from aimon_admin.approvals.tool_rule_grammar import PATTERN_WHOLE_DESTRUCTIVE, TOOL_NAME_EMPTY
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.services import local_tools_replace, tool_subject_set
from aimon_admin.runtimes.models import AgentRuntime
from tests.accounts.factories import logged_in
from tests.conftest import TEST_ACTOR
from tests.core.prg_support import assert_invalid_post_redirects_and_reloads
from tests.registry.factories import mcp_server, tools_synced

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def named_subjects() -> None:
    """The tools these rules name have subject arguments (U1: a pattern rule on a tool with
    none is refused, as it could never match)."""
    tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    tool_subject_set(server="git", tool="git_push", argument="remote", actor=TEST_ACTOR)


HTMX = {"HX-Request": "true"}
RULES = "/approvals/rules/"
ADD = "/approvals/rules/tools/add/"
NEW = "/approvals/rules/tools/new/"
PREVIEW = "/approvals/rules/tools/preview/"


def text_of(response: object) -> str:
    return html.unescape(response.content.decode())  # type: ignore[attr-defined]


def register(runtime: AgentRuntime, name: str = "Bash", **axes: str) -> None:
    local_tools_replace(
        runtime=runtime, tools=[{"name": name, "description": name, **axes}], actor=TEST_ACTOR
    )


def asked(runtime: AgentRuntime, subject: str, tool: str = "Bash") -> ApprovalRequest:
    """A tool request as the API leaves it (U2): the call's arguments, digest and subject."""
    arguments = {"command": subject}
    return ApprovalRequest.objects.create(
        kind=RequestKind.TOOL,
        runtime=runtime,
        tool=tool,
        arguments=arguments,
        arguments_digest=arguments_digest(arguments),
        subject_argument="command",
        subject=subject,
        expires_at=timezone.now() + dt.timedelta(minutes=5),
    )


def test_the_rules_page_lists_tool_rules_with_their_text_and_pre_approvals(
    runtime: AgentRuntime, operator: User, auditor: User
) -> None:
    # U1, U5: written as Tool(pattern); a pre-approval says whose unattended runs it answers.
    rules.tool_rule_create(text="Bash(rm:*)", action=RuleAction.DENY, actor=TEST_ACTOR)
    rules.tool_rule_create(
        text="Bash(make nightly)", action=RuleAction.ALLOW, runtime=runtime, unattended=True, actor=TEST_ACTOR
    )
    for person in (operator, auditor):
        page = text_of(logged_in(person).get(RULES))
        assert "<code>Bash(rm:*)</code>" in page
        assert "<code>Bash(make nightly)</code>" in page
        assert "Pre-approval: answers only agent-one's unattended runs." in page
        assert "How to write a tool rule" in page
    # Only operators write: the auditor gets no Add button and no delete buttons; the form
    # is on a page of its own.
    assert 'href="/approvals/rules/tools/add/">Add a tool rule</a>' in text_of(logged_in(operator).get(RULES))
    assert "Save tool rule" in text_of(logged_in(operator).get(ADD))
    auditor_page = text_of(logged_in(auditor).get(RULES))
    assert "Add a tool rule" not in auditor_page
    assert "/approvals/rules/tools/" not in auditor_page
    assert logged_in(auditor).get(ADD).status_code == 403


def test_a_pattern_for_a_tool_without_a_subject_argument_is_flagged(operator: User) -> None:
    # U1: a subject pattern needs the tool's subject argument named, else it matches nothing:
    # a rule saved while it was named is flagged once it is cleared.
    rules.tool_rule_create(text="Bash(rm:*)", action=RuleAction.DENY, actor=TEST_ACTOR)
    flag = NO_SUBJECT_FLAG.format(tool="Bash")
    assert flag not in text_of(logged_in(operator).get(RULES))
    tool_subject_set(server="", tool="Bash", argument="", actor=TEST_ACTOR)
    assert flag in text_of(logged_in(operator).get(RULES))


def test_a_pattern_rule_for_a_tool_without_a_subject_is_refused_not_saved(operator: User) -> None:  # U1
    # A rule that could never match would look saved and block nothing.
    response = logged_in(operator).post(
        NEW, {"tool-text": "nosuchtool(x:*)", "tool-action": "DENY"}, follow=True
    )
    page = text_of(response)
    assert tool_rules.PATTERN_WITHOUT_SUBJECT.format(tool="nosuchtool") in page
    assert "saved" not in page.split("Tool rules")[0]
    assert not ToolRule.objects.exists()
    with pytest.raises(ValidationError) as raised:
        rules.tool_rule_create(text="git/git_reset(--hard:*)", action=RuleAction.DENY, actor=TEST_ACTOR)
    assert raised.value.message_dict == {
        "text": [tool_rules.PATTERN_WITHOUT_SUBJECT.format(tool="git/git_reset")]
    }


def test_a_rule_for_a_tool_nobody_registered_is_saved_with_a_plain_warning(operator: User) -> None:  # U1
    response = logged_in(operator).post(NEW, {"tool-text": "Bash(rm:*)", "tool-action": "DENY"}, follow=True)
    page = text_of(response)
    assert "Tool rule Bash(rm:*) saved." in page
    assert tool_rules.TOOL_NOT_REGISTERED_WARNING.format(tool="Bash") in page
    assert ToolRule.objects.get().pattern == "rm:*"


def test_an_operator_saves_a_tool_rule(runtime: AgentRuntime, operator: User) -> None:
    response = logged_in(operator).post(
        NEW,
        {
            "tool-text": "Bash(git status:*)",
            "tool-runtime": "agent-one",
            "tool-action": "ALLOW",
            "tool-note": "ro",
        },
    )
    assert response.status_code == 302
    rule = ToolRule.objects.get()
    assert response["Location"] == f"/approvals/rules/#tool-rule-{rule.pk}"  # at the new rule
    assert (rule.tool, rule.pattern, rule.action, rule.runtime, rule.note) == (
        "Bash",
        "git status:*",
        "ALLOW",
        runtime,
        "ro",
    )
    assert AuditEvent.objects.filter(action=AuditAction.TOOL_RULE_CREATED, actor=operator).exists()


@pytest.mark.parametrize(
    ("data", "shows"),
    [
        # Bad input: an empty tool name, control characters; named beside the field.
        ({"tool-text": "(git:*)", "tool-action": "DENY"}, [TOOL_NAME_EMPTY, 'value="(git:*)"']),
        (
            {"tool-text": "Bash(git\x1b)", "tool-action": "DENY"},
            ["No control characters in a subject pattern"],
        ),
        # U5: a pre-approval is one runtime's ALLOW.
        (
            {"tool-text": "Bash(make)", "tool-action": "ALLOW", "tool-unattended": "on"},
            [tool_rules.PRE_APPROVAL_NEEDS_RUNTIME],
        ),
        (
            {
                "tool-text": "Bash(make)",
                "tool-action": "ASK",
                "tool-runtime": "agent-one",
                "tool-unattended": "on",
            },
            [tool_rules.PRE_APPROVAL_NEEDS_ALLOW],
        ),
        # U3, U5: never the whole of a destructive tool (here: one nobody registered).
        (
            {"tool-text": "Bash", "tool-action": "ALLOW", "tool-runtime": "agent-one"},
            [tool_rules.WHOLE_TOOL_UNREGISTERED.format(tool="Bash")],
        ),
    ],
)
def test_a_refused_tool_rule_is_shown_again_with_its_problem(
    runtime: AgentRuntime, operator: User, data: dict[str, str], shows: list[str]
) -> None:
    assert_invalid_post_redirects_and_reloads(logged_in(operator), NEW, data, page=ADD, shows=shows)
    assert not ToolRule.objects.exists()


def test_the_same_tool_rule_twice_is_refused_beside_the_field(operator: User) -> None:
    rules.tool_rule_create(text="Bash(rm:*)", action=RuleAction.DENY, actor=TEST_ACTOR)
    assert_invalid_post_redirects_and_reloads(
        logged_in(operator),
        NEW,
        {"tool-text": "Bash(rm:*)", "tool-action": "ASK"},
        page=ADD,
        shows=["already exists for every runtime", 'value="Bash(rm:*)"'],
    )


def test_the_preview_names_the_tool_its_subject_and_the_recent_calls_it_matches(
    runtime: AgentRuntime, operator: User
) -> None:
    # U1: which known tools it names and which recent calls it would have matched.
    register(runtime, side_effect_level="MUTATING", destructive_behavior="DESTRUCTIVE")
    tool_subject_set(server="", tool="Bash", argument="command", actor=TEST_ACTOR)
    for subject in ("git push origin main", "git push origin dev && rm -rf /", "ls", "git pull"):
        asked(runtime, subject)
    client = logged_in(operator)
    response = client.get(PREVIEW, {"tool-text": "Bash(git push:*)", "tool-action": "ALLOW"}, headers=HTMX)
    fragment = text_of(response)
    assert '<div id="tool-rule-preview"' in fragment
    assert "<html" not in fragment
    assert "registered by runtime agent-one (writes, destructive, not idempotent)" in fragment
    assert "Its subject is the argument <code>command</code>." in fragment
    assert "Of the 4 subjects asked about recently, it would allow 1." in fragment
    assert "<li><code>git push origin main</code></li>" in fragment
    # The chained call: an allow does not cover it (it asks), and the preview says so.
    assert "1 more begins the same way but chains another command" in fragment
    assert (
        "<li><code>git push origin dev &amp;&amp; rm -rf /</code></li>" in response.content.decode()
    )  # escaped
    # As a DENY, the same pattern covers both.
    deny = text_of(
        client.get(PREVIEW, {"tool-text": "Bash(git push:*)", "tool-action": "DENY"}, headers=HTMX)
    )
    assert "it would refuse 2." in deny
    # The whole of a destructive tool: refused before saving.
    whole = text_of(client.get(PREVIEW, {"tool-text": "Bash", "tool-action": "ALLOW"}, headers=HTMX))
    assert PATTERN_WHOLE_DESTRUCTIVE in whole
    assert "It covers every call of Bash, whatever the arguments." in whole


def test_the_preview_of_one_runtime_counts_its_calls_only(
    runtime: AgentRuntime, other_runtime: AgentRuntime, operator: User
) -> None:
    asked(runtime, "ls")
    asked(other_runtime, "ls -la")
    fragment = text_of(
        logged_in(operator).get(
            PREVIEW,
            {"tool-text": "Bash(ls:*)", "tool-action": "ASK", "tool-runtime": "agent-two"},
            headers=HTMX,
        )
    )
    assert "Of the 1 subject asked about recently by agent-two, it would ask about 1." in fragment
    assert "is not registered by agent-two or an enabled MCP server yet" in fragment
    assert "Bash has no subject argument named" not in fragment  # named by named_subjects


@pytest.mark.parametrize(
    ("params", "shows"),
    [
        ({}, TOOL_PREVIEW_EMPTY_MESSAGE),
        ({"tool-text": "Bash(x"}, "Not a valid rule: A subject pattern is written in brackets"),
        ({"tool-text": "x" * 5000}, "Not a valid rule:"),
        ({"tool-text": "Bash(ls)", "tool-runtime": "bad\x00name", "tool-action": "NOPE"}, "Bash"),
        ({"tool-text": "bad server!/t(x)"}, "is not an MCP server name"),
    ],
)
def test_the_preview_of_bad_input_says_what_is_wrong_never_a_500(
    operator: User, params: dict[str, str], shows: str
) -> None:
    response = logged_in(operator).get(PREVIEW, params, headers=HTMX)
    assert response.status_code == 200
    assert shows in text_of(response)


def test_check_rule_without_script_shows_the_preview_at_its_own_address(operator: User) -> None:
    client = logged_in(operator)
    response = client.post(NEW, {"tool-text": "Bash(ls:*)", "tool-action": "DENY", "tool-check": "1"})
    assert response.status_code == 303
    assert response["Location"].startswith(PREVIEW + "?")
    page = text_of(client.get(response["Location"]))
    assert "<h1>Add a tool rule</h1>" in page  # the add page, the form as typed
    assert 'value="Bash(ls:*)"' in page
    assert '<option value="DENY" selected>' in page
    assert "No call of Bash has been asked about yet." in page
    assert not ToolRule.objects.exists()


def test_deleting_a_tool_rule_asks_first_then_audits(operator: User) -> None:
    rule = rules.tool_rule_create(text="Bash(rm:*)", action=RuleAction.DENY, actor=TEST_ACTOR)
    client = logged_in(operator)
    confirm = text_of(client.get(f"/approvals/rules/tools/{rule.pk}/delete/"))
    assert "Delete the tool rule Bash(rm:*)?" in confirm
    assert "no longer refused by this rule" in confirm
    response = client.post(f"/approvals/rules/tools/{rule.pk}/delete/")
    assert response.status_code == 302
    assert not ToolRule.objects.exists()
    assert AuditEvent.objects.filter(action=AuditAction.TOOL_RULE_DELETED, actor=operator).exists()


def test_only_operators_write_tool_rules(approver: User, auditor: User) -> None:
    rule = rules.tool_rule_create(text="Bash(rm:*)", action=RuleAction.DENY, actor=TEST_ACTOR)
    for person in (approver, auditor):
        client = logged_in(person)
        assert client.post(NEW, {"tool-text": "Bash(x)", "tool-action": "ALLOW"}).status_code == 403
        assert client.get(PREVIEW, {"tool-text": "Bash"}).status_code == 403
        assert client.post(f"/approvals/rules/tools/{rule.pk}/delete/").status_code == 403
    assert logged_in(approver).get(RULES).status_code == 403
    assert ToolRule.objects.count() == 1


def test_a_refusal_for_ignored_claims_links_to_the_servers_trust_page(operator: User) -> None:  # U3
    # The refusal names where to mend its cause, and the page makes that address a link.
    claims = {"readOnlyHint": False, "destructiveHint": False}
    tools_synced(mcp_server("files"), [{"name": "write_note", "annotations": claims}])
    response = logged_in(operator).post(
        NEW, {"tool-text": "files/write_note", "tool-action": "ALLOW"}, follow=True
    )
    page = response.content.decode()
    assert "counts as destructive only because its server&#x27;s claims are ignored" in page
    assert '<a href="/registry/servers/files/trust/">/registry/servers/files/trust/</a>' in page
    assert not ToolRule.objects.exists()
