"""Hypothesis fuzzing of the YAML loader: `config_parse` turns any bytes into a Config or a
ConfigError naming FILE:LINE, never anything else (T13: a file with any error changes
nothing, so it must be refused cleanly)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from aimon_admin.registry.choices import AnnotationTrust
from aimon_admin.registry.config import NESTED_TOO_DEEP, SERVER_KEYS, Config, ConfigError, config_parse
from tests.fuzzing import budget

FILENAME = "fuzz.yaml"
EXAMPLES = 300

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["IGNORE", "TRUST", "ignore", "STDIO", "STREAMABLE_HTTP", "http://127.0.0.1/mcp"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
# Server settings drawn from the real keys, with values of every kind.
server = st.dictionaries(st.sampled_from([*SERVER_KEYS, "extra"]), values, max_size=len(SERVER_KEYS))
documents = st.one_of(
    values,
    st.fixed_dictionaries({"mcpServers": st.dictionaries(st.text(max_size=30), server, max_size=3)}),
)
YAML_SNIPPETS = [
    "mcpServers:",
    "  ",
    "\n",
    "- ",
    ": ",
    "&a ",
    "*a ",
    "!!binary ",
    "!!python/object ",
    "[",
    "{",
    "'",
    '"',
    "#",
    "<<: ",
    "%YAML 1.1\n",
    "---\n",
    "\t",
    "\x00",
    "\ufeff",
]


def parse(data: bytes | str) -> Config | ConfigError:
    try:
        return config_parse(data, filename=FILENAME)
    except ConfigError as exc:
        return exc


def assert_config_or_error(data: bytes | str) -> None:
    result = parse(data)  # anything but ConfigError propagates and fails the example
    if isinstance(result, ConfigError):
        assert result.errors
        assert all(error.startswith(f"{FILENAME}:") for error in result.errors)
        return
    for spec in result.servers:  # T13: what is accepted is one of the two trust values
        assert spec.annotation_trust in (AnnotationTrust.IGNORE, AnnotationTrust.TRUST)


@budget(EXAMPLES)
@given(st.binary(max_size=400))
def test_any_bytes_give_a_config_or_a_config_error(data: bytes) -> None:
    assert_config_or_error(data)


@budget(EXAMPLES)
@given(st.lists(st.sampled_from(YAML_SNIPPETS) | st.text(max_size=8), max_size=40).map("".join))
def test_yaml_like_text_gives_a_config_or_a_config_error(text: str) -> None:
    assert_config_or_error(text)


@budget(EXAMPLES)
@given(documents)
def test_well_formed_yaml_of_any_shape_gives_a_config_or_a_config_error(document: Any) -> None:
    assert_config_or_error(yaml.safe_dump(document, allow_unicode=True))


# Each example costs PyYAML's pure-Python composer over a second of CPU before it overflows, and
# every depth past the limit fails alike: two depths for each opener (twenty under `make fuzz`).
@pytest.mark.parametrize("opener", ["[", "{", "mcpServers: ["])
@budget(2)
@given(st.integers(min_value=1_500, max_value=20_000))
def test_deep_nesting_is_a_config_error_not_a_recursion_error(opener: str, depth: int) -> None:
    # Found by this fuzzing: PyYAML composes recursively, so "[[[[…" escaped as RecursionError.
    result = parse(opener + "[" * depth)

    assert isinstance(result, ConfigError)
    assert result.errors == [f"{FILENAME}:1: invalid YAML: {NESTED_TOO_DEEP}"]
