"""Hypothesis fuzzing of the skill-pattern matcher: `RuleIndex.lookup` never raises on any
pattern or skill name, agrees with a scan of every rule, and its memory never changes an
answer (S2: the rules layer of the chain)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aimon_admin.approvals.choices import GrantScope, RuleAction
from aimon_admin.approvals.policy import RuleIndex, RuleSpec
from tests.fuzzing import budget

EXAMPLES = 400
# Pattern text: wildcards and brackets (unclosed, negated, ranges) mixed with name characters.
pattern_chars = st.sampled_from([*"ab.-_/:*?[]!^\\", "git", "git.", "deploy"])
patterns = st.lists(pattern_chars | st.text(max_size=3), max_size=12).map("".join)
skills = st.lists(
    st.sampled_from([*"ab.-_/:*?[]!", "git", "git.", "deploy"]) | st.text(max_size=3), max_size=12
).map("".join)
RUNTIMES = (1, 2)


@st.composite
def rule_sets(draw: st.DrawFn) -> list[RuleSpec]:
    count = draw(st.integers(min_value=0, max_value=12))
    return [
        RuleSpec(
            id=number,
            runtime_id=draw(st.sampled_from([None, *RUNTIMES])),
            pattern=draw(patterns),
            action=draw(st.sampled_from(list(RuleAction))),
            widest_scope=draw(st.sampled_from(list(GrantScope))),
        )
        for number in range(1, count + 1)
    ]


def scan(rules: list[RuleSpec], runtime_id: int, skill: str) -> RuleSpec | None:
    """The rule that must win, by looking at every rule (what the index must never differ from)."""
    matching = [r for r in rules if r.runtime_id in (None, runtime_id) and r.matches(skill)]
    return min(matching, key=RuleSpec.precedence, default=None)


@budget(EXAMPLES)
@given(rule_sets(), st.lists(st.tuples(st.sampled_from(RUNTIMES), skills), min_size=1, max_size=8))
def test_lookup_never_raises_and_agrees_with_a_scan_of_every_rule(
    rules: list[RuleSpec], asks: list[tuple[int, str]]
) -> None:
    index = RuleIndex(rules)
    for runtime_id, skill in asks * 2:  # the second round is answered from the memory
        found = index.lookup(runtime_id, skill)
        assert found == scan(rules, runtime_id, skill)
        assert found is None or found.runtime_id in (None, runtime_id)


@budget(50)
@given(rule_sets(), skills)
def test_a_full_memory_starts_again_without_changing_an_answer(rules: list[RuleSpec], skill: str) -> None:
    index = RuleIndex(rules)
    index.ANSWERS_KEPT = 3  # type: ignore[misc]
    for round_ in range(3):
        for suffix in ("", "x", "y", "z", ".q"):
            assert index.lookup(1, skill + suffix) == scan(rules, 1, skill + suffix), round_
    assert len(index._answers) <= 3
