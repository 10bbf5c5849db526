"""U5 on the gate pages: the simulator shows, per tool, which ALLOW rule or pre-approval
answers its unattended calls, and the worklist's forecast counts what would still fail."""

from __future__ import annotations

import html

import pytest

from aimon_admin.accounts.models import User
from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import RuleAction
from aimon_admin.approvals.models import ToolRule
from aimon_admin.core.plurals import counted
from aimon_admin.registry import home as registry_home
from aimon_admin.registry.extensions import AllowRule, unattended_rules, unattended_rules_many
from aimon_admin.registry.services import local_tools_replace, tool_subject_set
from aimon_admin.registry.views.gate import FORECAST, RULES_ANSWER_EVERY_CALL, RULES_ANSWER_SOME_CALLS
from aimon_admin.runtimes.models import AgentRuntime
from tests.accounts.factories import logged_in
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}
WRITES = {"side_effect_level": "MUTATING", "destructive_behavior": "NON_DESTRUCTIVE"}
DESTROYS = {"side_effect_level": "MUTATING", "destructive_behavior": "DESTRUCTIVE"}


@pytest.fixture
def tools(runtime: AgentRuntime, other_runtime: AgentRuntime) -> None:
    """agent-one asks about every write (threshold READ_ONLY): Bash and rm destroy, make and
    deploy write. Rules: a pre-approval of Bash(make nightly) for agent-one, an ALLOW of the
    whole of make for every runtime, agent-two's own pre-approval of deploy."""
    local_tools_replace(
        runtime=runtime,
        tools=[
            {"name": "Bash", "description": "shell", **DESTROYS},
            {"name": "rm", "description": "remove", **DESTROYS},
            {"name": "make", "description": "build", **WRITES},
            {"name": "deploy", "description": "ship", **WRITES},
        ],
        actor=TEST_ACTOR,
    )
    local_tools_replace(
        runtime=other_runtime, tools=[{"name": "deploy", "description": "ship", **WRITES}], actor=TEST_ACTOR
    )
    tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    tool_subject_set(server=None, tool="deploy", argument="target", actor=TEST_ACTOR)
    rules.tool_rule_create(
        text="Bash(make nightly)", action=RuleAction.ALLOW, runtime=runtime, unattended=True, actor=TEST_ACTOR
    )
    rules.tool_rule_create(text="make", action=RuleAction.ALLOW, actor=TEST_ACTOR)
    rules.tool_rule_create(
        text="deploy(prod)", action=RuleAction.ALLOW, runtime=other_runtime, unattended=True, actor=TEST_ACTOR
    )
    # Saved before rm turned out destructive (the service refuses it now): it answers nothing.
    ToolRule.objects.create(runtime=runtime, tool="rm", pattern="", action=RuleAction.ALLOW)
    rules.tool_rule_create(text="Bash(rm:*)", action=RuleAction.DENY, actor=TEST_ACTOR)


def test_the_rules_that_answer_a_runtimes_unattended_calls(runtime: AgentRuntime, tools: None) -> None:
    # U5: its pre-approvals and every ALLOW rule that applies to it; never another runtime's.
    assert dict(unattended_rules(runtime)) == {
        ("", "Bash"): [AllowRule("Bash(make nightly)", pre_approval=True, every_call=False)],
        ("", "make"): [AllowRule("make", pre_approval=False, every_call=True)],
        ("", "rm"): [AllowRule("rm", pre_approval=False, every_call=True)],
    }


def test_the_simulator_shows_which_rule_answers_each_unattended_refusal(
    runtime: AgentRuntime, tools: None, auditor: User
) -> None:
    query = "runtime=agent-one&exempt_at_or_below=READ_ONLY&mode=unattended"
    page = html.unescape(
        logged_in(auditor).get(f"/registry/simulator/?{query}", headers=HTMX).content.decode()
    )
    assert "Calls their patterns match answered by <code>Bash(make nightly)</code> (pre-approval)." in page
    assert "Every call answered by <code>make</code>." in page
    # rm: its ALLOW of the whole tool answers nothing, rm being destructive; deploy: agent-two's.
    assert "<code>rm</code>" not in page
    assert "deploy(prod)" not in page
    assert counted(RULES_ANSWER_EVERY_CALL, 1) in page
    assert counted(RULES_ANSWER_SOME_CALLS, 1) in page


def test_attended_the_simulator_shows_the_gate_alone(
    runtime: AgentRuntime, tools: None, auditor: User
) -> None:
    query = "runtime=agent-one&exempt_at_or_below=READ_ONLY&mode=attended"
    page = logged_in(auditor).get(f"/registry/simulator/?{query}", headers=HTMX).content.decode()
    assert "answered by" not in page
    assert "Rules answer" not in page


def test_the_worklist_forecast_counts_what_would_still_fail(
    runtime: AgentRuntime, tools: None, operator: User
) -> None:
    # Four write tools fail unattended on the gate alone; make's ALLOW answers every call, so
    # three still fail; Bash's pre-approval answers some of its calls.
    page = html.unescape(
        logged_in(operator)
        .get("/registry/simulator/worklist/?runtime=agent-one&exempt_at_or_below=READ_ONLY", headers=HTMX)
        .content.decode()
    )
    assert counted(FORECAST, 3) in page
    assert counted(RULES_ANSWER_EVERY_CALL, 1) in page
    assert counted(RULES_ANSWER_SOME_CALLS, 1) in page


def test_without_rules_the_forecast_is_the_gates(runtime: AgentRuntime, operator: User) -> None:
    local_tools_replace(
        runtime=runtime, tools=[{"name": "Bash", "description": "shell", **DESTROYS}], actor=TEST_ACTOR
    )
    page = html.unescape(
        logged_in(operator)
        .get("/registry/simulator/worklist/?runtime=agent-one", headers=HTMX)
        .content.decode()
    )
    assert counted(FORECAST, 1) in page
    assert "Rules answer" not in page


def test_the_rules_of_several_runtimes_at_once_are_each_ones_own(
    runtime: AgentRuntime, other_runtime: AgentRuntime, tools: None
) -> None:
    # U5, read for every runtime in one query (the home's forecast): the same as one by one.
    assert unattended_rules_many([runtime, other_runtime]) == {
        runtime.pk: unattended_rules(runtime),
        other_runtime.pk: unattended_rules(other_runtime),
    }


def test_the_homes_forecast_is_the_worklists_for_each_runtime(
    runtime: AgentRuntime, other_runtime: AgentRuntime, tools: None, operator: User
) -> None:
    # U5: counted by axes for every runtime at once, the home's forecast is the worklist's,
    # tool by tool, rules included: make answered whole, rm not (destructive), agent-two's
    # deploy only for calls its pattern matches.
    client = logged_in(operator)
    failing = {
        name: client.get("/registry/simulator/worklist/", {"runtime": name}).context["failing"]
        for name in ("agent-one", "agent-two")
    }
    assert failing == {"agent-one": 3, "agent-two": 1}
    assert registry_home.unattended_forecast() == [("agent-one", 3), ("agent-two", 1)]
