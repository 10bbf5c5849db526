"""The rule index the chain reads, built from rules written through the services.

Every lookup is checked against a brute-force reading of the rule rows themselves. No
timing is asserted: that a lookup reads only the matching buckets is pinned (as behaviour)
in test_policy.py.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from django.core.cache import cache

from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import GrantScope, RuleAction
from aimon_admin.approvals.models import SkillRule
from aimon_admin.approvals.policy import RuleSpec, stored_rule_action
from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.test_policy import brute_force
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_rule_index() -> Iterator[None]:
    """The rule index is cached per process, and that outlives each test's rollback: start
    and end every test with none cached, so no test reads an index another one built."""
    forget_rule_index()
    yield
    forget_rule_index()


def forget_rule_index() -> None:
    key = getattr(rules, "VERSION_CACHE_KEY", None)
    if key:
        cache.delete(key)
    rules.rule_index_reset()


def specs_from_rows() -> list[RuleSpec]:
    return [
        RuleSpec(
            id=row.pk,
            runtime_id=row.runtime_id,
            pattern=row.pattern,
            action=stored_rule_action(row.action, row.pattern),  # a bad pattern's ALLOW reads as ASK
            widest_scope=GrantScope(row.widest_scope),
        )
        for row in SkillRule.objects.all()
    ]


def winner(runtime: AgentRuntime, skill: str) -> tuple[str, str | None] | None:
    found = rules.rule_index().lookup(runtime.pk, skill)
    return (found.pattern, found.action) if found else None


def create(
    pattern: str, action: RuleAction, runtime: AgentRuntime | None = None, **extra: object
) -> SkillRule:
    return rules.rule_create(pattern=pattern, action=action, actor=TEST_ACTOR, runtime=runtime, **extra)  # type: ignore[arg-type]


def test_precedence_of_rules_written_through_the_services(
    runtime: AgentRuntime, other_runtime: AgentRuntime
) -> None:
    create("*", RuleAction.ASK)
    create("deploy*", RuleAction.ALLOW)
    create("deploy*", RuleAction.DENY, runtime)  # runtime-specific beats the global one
    create("deploy-prod*", RuleAction.ALLOW)  # a longer literal prefix beats both
    create("deploy-prod", RuleAction.ASK, other_runtime)  # exact, but another runtime's
    create("deploy-prod-eu", RuleAction.ALLOW)  # exact beats every glob
    create("notify*", RuleAction.ALLOW)
    create("notify*x", RuleAction.DENY)  # same prefix and runtime: the stricter action
    create("wipe*", RuleAction.ASK)
    create("wip*", RuleAction.DENY)

    assert winner(runtime, "deploy-x") == ("deploy*", RuleAction.DENY)
    assert winner(other_runtime, "deploy-x") == ("deploy*", RuleAction.ALLOW)
    assert winner(runtime, "deploy-prod") == ("deploy-prod*", RuleAction.ALLOW)
    assert winner(other_runtime, "deploy-prod") == ("deploy-prod", RuleAction.ASK)
    assert winner(runtime, "deploy-prod-eu") == ("deploy-prod-eu", RuleAction.ALLOW)
    assert winner(runtime, "notifyx") == ("notify*x", RuleAction.DENY)
    assert winner(runtime, "notifyz") == ("notify*", RuleAction.ALLOW)
    assert winner(runtime, "wipe-all") == ("wipe*", RuleAction.ASK)
    assert winner(runtime, "other") == ("*", RuleAction.ASK)
    specs = specs_from_rows()
    for skill in ("deploy-x", "deploy-prod", "deploy-prod-eu", "notifyx", "notifyz", "wipe-all", "other", ""):
        for rt in (runtime, other_runtime):
            assert rules.rule_index().lookup(rt.pk, skill) == brute_force(specs, rt.pk, skill)


def test_the_oldest_rule_wins_a_tie(runtime: AgentRuntime) -> None:
    older = create("de*y", RuleAction.ASK)
    create("de*", RuleAction.ASK)

    found = rules.rule_index().lookup(runtime.pk, "deploy")

    assert found is not None
    assert found.id == older.pk


def test_the_index_follows_every_change_at_once(runtime: AgentRuntime) -> None:
    assert winner(runtime, "deploy") is None
    rule = create("deploy", RuleAction.DENY, runtime)
    assert winner(runtime, "deploy") == ("deploy", RuleAction.DENY)

    rules.rule_delete(rule=rule, actor=TEST_ACTOR)
    rule = rules.rule_create(
        pattern="deploy",
        action=RuleAction.ASK,
        widest_scope=GrantScope.TURN,
        runtime=runtime,
        actor=TEST_ACTOR,
    )
    found = rules.rule_index().lookup(runtime.pk, "deploy")
    assert found is not None
    assert (found.action, found.widest_scope) == (RuleAction.ASK, GrantScope.TURN)

    rules.rule_delete(rule=rule, actor=TEST_ACTOR)
    assert winner(runtime, "deploy") is None


def test_the_index_is_rebuilt_only_when_the_rule_set_changes(runtime: AgentRuntime) -> None:
    create("deploy", RuleAction.DENY)
    first = rules.rule_index()
    assert rules.rule_index() is first  # nothing changed: the same index

    # A row written around the services bumps no version, so no evaluation sees it...
    SkillRule.objects.create(pattern="notify", action=RuleAction.DENY)
    assert rules.rule_index() is first
    assert winner(runtime, "notify") is None

    # ... until the next change through them, which brings in everything.
    create("wipe", RuleAction.DENY)
    assert rules.rule_index() is not first
    assert winner(runtime, "notify") == ("notify", RuleAction.DENY)
    assert winner(runtime, "wipe") == ("wipe", RuleAction.DENY)


def test_a_thousand_rules_agree_with_brute_force(runtime: AgentRuntime, other_runtime: AgentRuntime) -> None:
    rng = random.Random(1000)  # noqa: S311 - a fixed, repeatable mix
    words = ["deploy", "notify", "read", "write", "wipe", "git", "db", "mail", "ssh", "s3"]
    rows, seen = [], set()
    while len(rows) < 999:
        word = rng.choice(words)
        pattern = word[: rng.randint(0, len(word))] + rng.choice(
            ["", "*", "?", "-*", "-[a-c]*", f"-{rng.randint(0, 50)}"]
        )
        target = rng.choice([None, runtime, other_runtime])
        key = (pattern, target.pk if target else None)
        if not pattern or key in seen:
            continue
        seen.add(key)
        rows.append(SkillRule(runtime=target, pattern=pattern, action=rng.choice(list(RuleAction))))
    # Bulk-written for speed; the last through the service, whose version bump the index follows.
    SkillRule.objects.bulk_create(rows)
    create("zz-last", RuleAction.DENY)
    specs = specs_from_rows()
    assert len(specs) == 1000
    index = rules.rule_index()

    skills = [f"{w}-{rng.randint(0, 60)}" for w in words for _ in range(5)] + [
        *words,
        "zz-last",
        "nothing",
        "",
    ]
    found_some = 0
    for skill in skills:
        for rt in (runtime, other_runtime):
            found = index.lookup(rt.pk, skill)
            assert found == brute_force(specs, rt.pk, skill), (skill, rt.name)
            found_some += found is not None
    assert found_some > len(skills)  # the check is not vacuous


def test_a_stored_allow_whose_pattern_breaks_the_grammar_is_read_as_ask(runtime: AgentRuntime) -> None:
    # `***` (stored before the grammar) answered ALLOW for every skill of every runtime. Until
    # an operator deletes it, the chain reads it as ASK; a bad DENY stays.
    SkillRule.objects.create(pattern="***", action=RuleAction.ALLOW)
    SkillRule.objects.create(pattern="wipe?", action=RuleAction.DENY)
    create("zz", RuleAction.ASK)  # a change through the services: the index is rebuilt
    assert winner(runtime, "deploy") == ("***", RuleAction.ASK)
    assert winner(runtime, "wipe1") == ("wipe?", RuleAction.DENY)


def test_rule_index_reset_makes_the_next_read_build_the_index_afresh(runtime: AgentRuntime) -> None:
    # Tests reset the process's index through this public function, not by poking its cache.
    before = rules.rule_index()
    # A row written behind the services' back leaves the version as it was: the cached index
    # goes on serving until it is reset.
    SkillRule.objects.create(runtime=runtime, pattern="deploy-*", action=RuleAction.ALLOW)
    assert rules.rule_index() is before
    assert rules.rule_index().lookup(runtime.pk, "deploy-prod") is None
    rules.rule_index_reset()
    found = rules.rule_index().lookup(runtime.pk, "deploy-prod")
    assert found is not None
    assert found.pattern == "deploy-*"
