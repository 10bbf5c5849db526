"""Skill-rule patterns: the grammar, the services that enforce it, the rules page (preview,
confirmation for ALLOW *, flags on stored bad patterns)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from aimon_admin.accounts.models import User
from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import RuleAction
from aimon_admin.approvals.forms import CONFIRM_EVERYTHING_LABEL, RuleForm
from aimon_admin.approvals.models import SkillRule
from aimon_admin.approvals.policy import (
    PATTERN_BRACKET_MESSAGE,
    PATTERN_CHAR_MESSAGE,
    PATTERN_CONTROL_MESSAGE,
    PATTERN_EMPTY_MESSAGE,
    PATTERN_SPACE_MESSAGE,
    PATTERN_STARS_MESSAGE,
    PATTERN_TOO_LONG_MESSAGE,
    pattern_matching,
    skill_pattern_problems,
    stored_rule_action,
)
from aimon_admin.approvals.rule_views import PREVIEW_EMPTY_MESSAGE
from aimon_admin.approvals.rules import ALLOW_EVERYTHING_MESSAGE
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime
from tests.accounts.factories import logged_in
from tests.approvals.factories import open_skill_request
from tests.conftest import TEST_ACTOR

# --- The grammar (pure) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("***", [PATTERN_STARS_MESSAGE.format(position=1)]),
        ("deploy-**", [PATTERN_STARS_MESSAGE.format(position=8)]),
        ("[a-z", [PATTERN_BRACKET_MESSAGE.format(char="[", position=1)]),
        ("deploy-?", [PATTERN_BRACKET_MESSAGE.format(char="?", position=8)]),
        ("deploy prod", [PATTERN_SPACE_MESSAGE.format(position=7)]),
        ("deploy\tprod", [PATTERN_CONTROL_MESSAGE.format(position=7)]),
        ("a\x00b", [PATTERN_CONTROL_MESSAGE.format(position=2)]),
        ("déploy", [PATTERN_CHAR_MESSAGE.format(char="'é'", position=2)]),
        ("", [PATTERN_EMPTY_MESSAGE]),
        ("x" * 201, [PATTERN_TOO_LONG_MESSAGE.format(limit=200, length=201)]),
        (
            "a b [c",
            [PATTERN_SPACE_MESSAGE.format(position=2), PATTERN_BRACKET_MESSAGE.format(char="[", position=5)],
        ),
    ],
)
def test_each_bad_pattern_is_refused_naming_its_problem(pattern: str, expected: list[str]) -> None:
    # `***`, `[a-z` and `deploy prod` were once accepted.
    assert skill_pattern_problems(pattern) == expected


@pytest.mark.parametrize(
    "pattern", ["deploy", "deploy-*", "*", "*-prod", "git:push", "ns/tool.v2", "a@b+c_d", "x" * 200, "a*b*c"]
)
def test_skill_names_and_single_star_wildcards_are_valid(pattern: str) -> None:
    assert skill_pattern_problems(pattern) == []


@pytest.mark.parametrize(
    ("action", "pattern", "read_as"),
    [
        (RuleAction.ALLOW, "***", RuleAction.ASK),
        (RuleAction.ALLOW, "deploy prod", RuleAction.ASK),
        (RuleAction.ALLOW, "deploy-*", RuleAction.ALLOW),
        (RuleAction.DENY, "[a-z", RuleAction.DENY),
        (RuleAction.ASK, "***", RuleAction.ASK),
    ],
)
def test_a_stored_allow_with_a_bad_pattern_is_read_as_ask(
    action: RuleAction, pattern: str, read_as: RuleAction
) -> None:
    assert stored_rule_action(action, pattern) == read_as


def test_pattern_matching_counts_as_the_rule_index_matches() -> None:
    skills = ["deploy-prod", "deploy-dev", "notify", "deploy"]
    assert pattern_matching("deploy-*", skills) == ["deploy-prod", "deploy-dev"]
    assert pattern_matching("*", skills) == skills
    assert pattern_matching("notify", skills) == ["notify"]


# --- The services: no path stores a bad pattern ----------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("pattern", ["***", "[a-z", "deploy prod"])
def test_rule_create_refuses_a_bad_pattern_and_writes_nothing(pattern: str) -> None:
    before = AuditEvent.objects.count()
    with pytest.raises(ValidationError) as refused:
        rules.rule_create(pattern=pattern, action=RuleAction.ALLOW, actor=TEST_ACTOR)
    assert refused.value.message_dict["pattern"] == skill_pattern_problems(pattern)
    assert not SkillRule.objects.exists()
    assert AuditEvent.objects.count() == before


@pytest.mark.django_db
def test_rule_create_allows_every_skill_only_when_confirmed() -> None:
    with pytest.raises(ValidationError) as refused:
        rules.rule_create(pattern="*", action=RuleAction.ALLOW, actor=TEST_ACTOR)
    assert refused.value.message_dict["confirm_everything"] == [
        ALLOW_EVERYTHING_MESSAGE.format(where=" of every runtime")
    ]
    assert not SkillRule.objects.exists()
    rule = rules.rule_create(pattern="*", action=RuleAction.ALLOW, actor=TEST_ACTOR, confirm_everything=True)
    assert rule.action == RuleAction.ALLOW
    # A DENY or ASK for every skill is fail-closed: no confirmation needed.
    rules.rule_delete(rule=rule, actor=TEST_ACTOR)
    rules.rule_create(pattern="*", action=RuleAction.ASK, actor=TEST_ACTOR)


# --- The form and the page -------------------------------------------------------------------------


def test_a_new_rule_defaults_to_ask() -> None:
    # The form once defaulted to ALLOW.
    form = RuleForm()
    assert form["action"].value() == RuleAction.ASK
    assert 'value="ASK" selected' in str(form["action"])


@pytest.mark.django_db
@pytest.mark.parametrize("pattern", ["***", "[a-z", "deploy prod"])
def test_the_rules_page_refuses_a_bad_pattern_naming_the_problem(operator: User, pattern: str) -> None:
    # Shown after post/redirect/get, as often as the page is reloaded.
    response = logged_in(operator).post(
        "/approvals/rules/new/", {"pattern": pattern, "action": "ALLOW", "widest_scope": "AGENT"}, follow=True
    )
    assert response.redirect_chain[0][1] == 303
    assert response.status_code == 200
    html = response.content.decode()
    for problem in skill_pattern_problems(pattern):
        # Said once, beside the field: the preview below it does not repeat it.
        assert html.count(problem.replace("'", "&#x27;")) == 1
    assert not SkillRule.objects.exists()


@pytest.mark.django_db
def test_allow_for_every_skill_needs_the_confirmation_box(operator: User) -> None:
    client = logged_in(operator)
    data = {"pattern": "*", "action": "ALLOW", "widest_scope": "AGENT", "note": ""}
    refused = client.post("/approvals/rules/new/", data, follow=True)
    assert refused.status_code == 200
    assert ALLOW_EVERYTHING_MESSAGE.format(where=" of every runtime") in refused.content.decode()
    assert CONFIRM_EVERYTHING_LABEL in refused.content.decode()
    assert not SkillRule.objects.exists()
    saved = client.post("/approvals/rules/new/", {**data, "confirm_everything": "on"})
    assert saved.status_code == 302
    assert SkillRule.objects.get().pattern == "*"
    assert saved["Location"] == f"/approvals/rules/#rule-{SkillRule.objects.get().pk}"  # at the new rule
    assert AuditEvent.objects.filter(action=AuditAction.RULE_CREATED).count() == 1


@pytest.mark.django_db
def test_the_preview_counts_known_skills_before_saving(runtime: AgentRuntime, operator: User) -> None:
    open_skill_request(runtime, "deploy-prod", "deploy-dev", "notify", session_id="s-1", principal=None)
    client = logged_in(operator)
    fragment = client.get(
        "/approvals/rules/preview/", {"pattern": "deploy-*"}, headers={"HX-Request": "true"}
    )
    assert fragment.status_code == 200
    html = fragment.content.decode()
    assert 'id="pattern-preview"' in html
    assert "<strong>2</strong> of the 3 skills seen so far" in html
    assert "deploy-prod, deploy-dev" in html or "deploy-dev, deploy-prod" in html
    assert "<html" not in html
    everything = client.get("/approvals/rules/preview/", {"pattern": "*"}, headers={"HX-Request": "true"})
    assert "<strong>3</strong> of the 3 skills" in everything.content.decode()
    assert "every skill</strong>, including those not seen yet" in everything.content.decode()
    bad = client.get("/approvals/rules/preview/", {"pattern": "***"}, headers={"HX-Request": "true"})
    assert PATTERN_STARS_MESSAGE.format(position=1) in bad.content.decode()
    empty = client.get("/approvals/rules/preview/", {"pattern": ""}, headers={"HX-Request": "true"})
    assert PREVIEW_EMPTY_MESSAGE in empty.content.decode()
    assert not SkillRule.objects.exists()


@pytest.mark.django_db
def test_check_pattern_without_script_shows_the_preview_and_saves_nothing(
    runtime: AgentRuntime, operator: User
) -> None:
    open_skill_request(runtime, "deploy-prod", session_id="s-1", principal=None)
    client = logged_in(operator)
    before = AuditEvent.objects.count()
    page = client.post(
        "/approvals/rules/new/",
        {
            "pattern": "deploy-*",
            "runtime": "agent-one",
            "action": "DENY",
            "widest_scope": "AGENT",
            "check": "1",
        },
        follow=True,
    )
    # A GET of the preview's own address (a reload posts nothing).
    assert page.redirect_chain[0][1] == 303
    assert page.redirect_chain[0][0].startswith("/approvals/rules/preview/?pattern=deploy-%2A")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<strong>1</strong> of the 1 skill seen so far for agent-one" in html
    assert 'value="deploy-*"' in html
    assert 'value="DENY" selected' in html
    assert not SkillRule.objects.exists()
    assert AuditEvent.objects.count() == before


@pytest.mark.django_db
def test_the_preview_page_shows_the_form_as_given_in_the_address(
    runtime: AgentRuntime, operator: User
) -> None:
    page = logged_in(operator).get("/approvals/rules/preview/", {"pattern": "deploy-*", "action": "DENY"})
    assert page.status_code == 200
    assert "<html" in page.content.decode()
    assert 'value="DENY" selected' in page.content.decode()


@pytest.mark.django_db
def test_the_pattern_field_updates_the_preview_as_you_type_without_sending_the_csrf_token(
    operator: User,
) -> None:
    html = logged_in(operator).get("/approvals/rules/skills/add/").content.decode()
    assert 'hx-get="/approvals/rules/preview/"' in html
    assert 'hx-target="#pattern-preview"' in html
    assert 'hx-include="[name=&#x27;runtime&#x27;]"' in html
    assert "closest form" not in html
    assert 'name="check"' in html  # the no-script path is a POST: no token goes into a URL


@pytest.mark.django_db
def test_the_rule_list_flags_stored_bad_patterns_and_allow_everything(operator: User) -> None:
    SkillRule.objects.create(pattern="[a-z", action=RuleAction.ALLOW)  # written before the grammar
    SkillRule.objects.create(pattern="*", action=RuleAction.ALLOW)
    SkillRule.objects.create(pattern="deploy-*", action=RuleAction.DENY)
    html = logged_in(operator).get("/approvals/rules/").content.decode()
    assert html.count("Invalid pattern:") == 1
    assert "Read as Ask until it is deleted." in html
    assert PATTERN_BRACKET_MESSAGE.format(char="[", position=1) in html
    assert "Allows every skill of every runtime without asking." in html


@pytest.mark.django_db
def test_a_get_on_the_rule_form_address_goes_to_the_add_page(operator: User) -> None:
    # Reloading an invalid rule form's page was once "405 Not possible this way".
    response = logged_in(operator).get("/approvals/rules/new/")
    assert response.status_code == 302
    assert response["Location"] == "/approvals/rules/skills/add/"


def test_the_rules_page_lists_rules_and_the_form_has_a_page_of_its_own(operator: User, auditor: User) -> None:
    rules.rule_create(pattern="deploy-*", action=RuleAction.ASK, actor=TEST_ACTOR)
    listed = logged_in(operator).get("/approvals/rules/").content.decode()
    assert 'href="/approvals/rules/skills/add/">Add a skill rule</a>' in listed
    assert 'href="/approvals/rules/tools/add/">Add a tool rule</a>' in listed
    assert "<form" not in listed.split("<main", 1)[1]  # no form on the list: only its rows
    add = logged_in(operator).get("/approvals/rules/skills/add/").content.decode()
    assert 'action="/approvals/rules/new/"' in add
    assert 'name="check"' in add
    assert 'href="/approvals/rules/">Cancel</a>' in add
    # Auditors read the list: no button, and no add page.
    assert "Add a skill rule" not in logged_in(auditor).get("/approvals/rules/").content.decode()
    assert logged_in(auditor).get("/approvals/rules/skills/add/").status_code == 403


@pytest.mark.django_db
def test_a_long_note_is_cut_in_the_list_with_the_whole_note_on_hover(operator: User) -> None:
    # A 20,000-character note once broke the layout; now at most 1,000 are kept.
    note = "word " * 200
    rules.rule_create(pattern="deploy-*", action=RuleAction.ASK, note=note.strip(), actor=TEST_ACTOR)
    html = logged_in(operator).get("/approvals/rules/").content.decode()
    assert f'title="{note.strip()}"' in html
    assert html.count(note.strip()) == 1  # in the title only; the cell shows 300 characters


@pytest.mark.django_db
def test_a_20000_character_note_is_refused_by_the_form_and_the_service(operator: User) -> None:
    # Such a note was once saved.
    response = logged_in(operator).post(
        "/approvals/rules/new/",
        {"pattern": "deploy-*", "action": "ASK", "widest_scope": "AGENT", "note": "n" * 20_000},
        follow=True,
    )
    assert response.status_code == 200
    assert "Ensure this value has at most 1000 characters (it has 20000)." in response.content.decode()
    with pytest.raises(ValidationError) as refused:
        rules.rule_create(pattern="deploy-*", action=RuleAction.ASK, note="n" * 20_000, actor=TEST_ACTOR)
    assert "A note is at most 1000 characters." in refused.value.messages
    assert not SkillRule.objects.exists()


@pytest.mark.django_db
def test_known_skills_are_those_of_requests_and_grants_of_the_runtime_chosen(
    runtime: AgentRuntime, other_runtime: AgentRuntime, operator: User
) -> None:
    from aimon_admin.approvals.choices import Answer
    from aimon_admin.approvals.selectors import known_skills
    from aimon_admin.approvals.services import request_answer

    mine = open_skill_request(runtime, "deploy-prod", session_id="s-1", principal=None)
    request_answer(request=mine, user=operator, answer=Answer.ALLOW_SESSION)
    open_skill_request(other_runtime, "deploy-dev", "notify", session_id="s-2", principal=None)
    assert known_skills() == ["deploy-dev", "deploy-prod", "notify"]
    assert known_skills(runtime=runtime) == ["deploy-prod"]
    assert known_skills(runtime=other_runtime) == ["deploy-dev", "notify"]


@pytest.mark.django_db
def test_a_nul_byte_in_the_preview_or_the_form_is_no_server_error(
    runtime: AgentRuntime, operator: User
) -> None:
    # Bad input is never a 5xx: PostgreSQL refused a runtime name with a NUL byte (a 500
    # on the preview before the fix, in the PostgreSQL run).
    client = logged_in(operator)
    htmx = {"HX-Request": "true"}
    assert (
        client.get(
            "/approvals/rules/preview/", {"pattern": "a", "runtime": "x\x00y"}, headers=htmx
        ).status_code
        == 200
    )
    assert (
        client.get("/approvals/rules/preview/", {"pattern": "a\x00", "runtime": "agent-one"}).status_code
        == 200
    )
    form = {"pattern": "a", "runtime": "x\x00y", "action": "ASK", "widest_scope": "AGENT"}
    assert client.post("/approvals/rules/new/", form, follow=True).status_code == 200
    assert client.post("/approvals/rules/new/", {**form, "check": "1"}, follow=True).status_code == 200
    assert not SkillRule.objects.exists()
