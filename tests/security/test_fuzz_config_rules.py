"""Hypothesis fuzzing of load_config's rule sections: toolSubjects, toolRules and skillRules
of any shape give a Config or a ConfigError naming FILE:LINE, never anything else; what is
accepted follows the grammar (U1) and the pre-approval rule (U5)."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from aimon_admin.approvals.choices import RuleAction
from aimon_admin.approvals.config import SECTIONS, SKILL_RULE_KEYS, TOOL_RULE_KEYS
from aimon_admin.approvals.tool_rule_grammar import parse_rule_text
from aimon_admin.registry.config import Config, ConfigError, config_parse
from tests.fuzzing import budget

FILENAME = "fuzz.yaml"
EXAMPLES = 300

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        ["ALLOW", "ASK", "DENY", "SESSION", "Bash", "Bash(git:*)", "git/git_push(origin:*)", "(x)", "Bash(x"]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=15,
)
tool_rule = st.dictionaries(st.sampled_from([*TOOL_RULE_KEYS, "approvers"]), values, max_size=5)
skill_rule = st.dictionaries(st.sampled_from([*SKILL_RULE_KEYS, "approvers"]), values, max_size=5)
documents = st.fixed_dictionaries(
    {},
    optional={
        "toolSubjects": st.dictionaries(st.text(max_size=20), values, max_size=3) | values,
        "toolRules": st.lists(tool_rule | values, max_size=4) | values,
        "skillRules": st.lists(skill_rule | values, max_size=4) | values,
    },
)


def assert_config_or_error(text: str) -> None:
    try:
        result: Config | ConfigError = config_parse(text, filename=FILENAME, sections=SECTIONS)
    except ConfigError as exc:
        result = exc
    if isinstance(result, ConfigError):
        assert result.errors
        assert all(error.startswith(f"{FILENAME}:") for error in result.errors)
        return
    for entry in result.extra.get("toolRules", []):
        parse_rule_text(entry.text)  # accepted text is on the grammar
        assert not entry.unattended or (entry.action == RuleAction.ALLOW and entry.runtime)


@budget(EXAMPLES)
@given(documents)
def test_rule_sections_of_any_shape_give_a_config_or_a_config_error(document: Any) -> None:
    assert_config_or_error(yaml.safe_dump(document, allow_unicode=True))
