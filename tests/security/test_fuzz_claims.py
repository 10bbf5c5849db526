"""Hypothesis fuzzing of the MCP claims parser.

Annotations are whatever JSON a server sends (T10). `parse_hints`, `resolve` and the
drift and fingerprint helpers take any of it without raising, never read a wrong-typed
hint as a claim, and `mcp_tools_record` stores any listing verbatim, resolves it once
(T11, T12) and keeps the audit chain valid (A2); its only documented error is RegistryError.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given
from hypothesis import strategies as st

from aimon_admin.audit.services import audit_verify_chain
from aimon_admin.core.actors import Actor
from aimon_admin.registry import policy
from aimon_admin.registry.choices import (
    AnnotationTrust,
    DestructiveBehavior,
    IdempotencyBehavior,
    McpTransport,
    SideEffectLevel,
)
from aimon_admin.registry.models import Tool
from aimon_admin.registry.services import RegistryError, mcp_server_create, mcp_tools_record
from aimon_admin.registry.sync.fetch import _tool_problem
from tests.conftest import TEST_ACTOR
from tests.fuzzing import budget

EXAMPLES = 500
DB_EXAMPLES = 100
HINTS = tuple(policy.HINT_DEFAULTS)

# JSON as a server can send it: the hint names and their wrong types come up often.
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["yes", "true", "false", "0", "1", ""]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=15,
)
annotations = st.one_of(
    json_values,
    st.dictionaries(st.sampled_from([*HINTS, "title", "x-vendor"]), json_values, max_size=6),
    st.dictionaries(st.sampled_from(HINTS), st.booleans() | json_scalars, max_size=4),
)


@budget(EXAMPLES)
@given(annotations)
def test_hints_are_read_only_from_booleans(claims: Any) -> None:
    hints = policy.parse_hints(claims)

    for hint in HINTS:
        sent = claims.get(hint) if isinstance(claims, dict) else None
        expected = sent if isinstance(sent, bool) else policy.HINT_DEFAULTS[hint]  # T10
        assert hints.value(hint) is expected
    if isinstance(claims, dict):
        wrong = [h for h in HINTS if claims.get(h) is not None and not isinstance(claims[h], bool)]
        assert len(hints.warnings) == len(wrong)
    elif claims is not None:
        assert hints.warnings == (policy.ANNOTATIONS_NOT_AN_OBJECT,)


@budget(EXAMPLES)
@given(annotations, st.sampled_from(list(AnnotationTrust)), st.booleans())
def test_resolve_takes_any_claims_and_keeps_the_rules(claims: Any, trust: str, held: bool) -> None:
    resolution = policy.resolve(claims, trust, held_for_review=held)
    axes = resolution.axes

    assert axes.level in SideEffectLevel.values
    assert axes.destructive in DestructiveBehavior.values
    assert axes.idempotency in IdempotencyBehavior.values
    if trust == AnnotationTrust.IGNORE or held:  # T11, T15: claims not used
        assert axes == policy.UNREGISTERED
    if axes.level == SideEffectLevel.READ_ONLY:  # T5/T11: normalised
        assert axes.destructive == DestructiveBehavior.NON_DESTRUCTIVE
        assert isinstance(claims, dict)
        assert claims.get("readOnlyHint") is True  # only a real true makes a tool read-only


@budget(EXAMPLES)
@given(annotations, annotations, st.text(max_size=10), json_values, json_values)
def test_drift_and_fingerprint_take_any_claims(
    before: Any, after: Any, name: str, description: Any, schema: Any
) -> None:
    lowered = policy.claims_lowered_risk(before, after)
    assert set(lowered) <= {"readOnlyHint", "destructiveHint", "idempotentHint"}
    assert policy.claims_lowered_risk(before, before) == []  # T15: the same claims lower nothing
    fingerprint = policy.definition_fingerprint(name, description, schema, after)
    assert len(fingerprint) == 64
    assert fingerprint == policy.definition_fingerprint(name, description, schema, after)


# --- stored: mcp_tools_record -------------------------------------------------------------------

tool_names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=30)


@st.composite
def listings(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(tool_names, min_size=0, max_size=6, unique=True))
    listing = []
    for name in names:
        tool: dict[str, Any] = {"name": name}
        for key, strategy in (
            ("description", json_values),
            ("inputSchema", json_values),
            ("annotations", annotations),
        ):
            if draw(st.booleans()):
                tool[key] = draw(strategy)
        listing.append(tool)
    # As the fetch hands them on: a tool holding a NUL is refused there (test_hostile_mcp).
    assume(all(_tool_problem(tool) is None for tool in listing))
    return listing


def same_json(stored: Any, sent: Any) -> bool:
    """Equal as JSON. PostgreSQL's jsonb keeps a number as its decimal value, so 4.6e16 comes
    back as the int 46000000000000000: the same number, not the same Python type."""
    if isinstance(sent, float) and isinstance(stored, int | float) and not isinstance(stored, bool):
        return float(stored) == sent
    if isinstance(sent, dict) and isinstance(stored, dict):
        return stored.keys() == sent.keys() and all(same_json(stored[k], v) for k, v in sent.items())
    if isinstance(sent, list) and isinstance(stored, list):
        return len(stored) == len(sent) and all(same_json(a, b) for a, b in zip(stored, sent, strict=True))
    return type(stored) is type(sent) and stored == sent


@pytest.fixture
def trusted_server(db: None) -> Any:
    return mcp_server_create(
        name="fuzzed",
        transport=McpTransport.STREAMABLE_HTTP,
        url="http://127.0.0.1:9/mcp",
        annotation_trust=AnnotationTrust.TRUST,
        actor=TEST_ACTOR,
    )


@pytest.mark.django_db
@budget(DB_EXAMPLES, HealthCheck.function_scoped_fixture)
@given(first=listings(), second=listings(), complete=st.booleans())
def test_any_listing_is_stored_verbatim_resolved_once_and_audited(
    trusted_server: Any,
    runtime: Any,
    first: list[dict[str, Any]],
    second: list[dict[str, Any]],
    complete: bool,
) -> None:
    actor = TEST_ACTOR if complete else Actor.for_runtime(runtime)  # a relay is a runtime's word
    for listing in (first, second):
        result = mcp_tools_record(server=trusted_server, listing=listing, actor=actor, complete=complete)
        kept = {finding.tool.name: finding for finding in result.findings}
        stored = {tool.name: tool for tool in Tool.objects.filter(server=trusted_server)}
        for item in listing:
            tool = stored[item["name"]]
            # T10: verbatim; T15: a relay never changes a known tool, its finding keeps the claims.
            claims = kept[item["name"]].annotations if item["name"] in kept else tool.claims
            assert same_json(claims, item.get("annotations"))
            held = tool.awaiting_review
            resolution = policy.resolve(tool.claims, AnnotationTrust.TRUST, held_for_review=held)
            if complete:
                assert tool.axes == resolution.axes
            else:
                # T15: a relay never lowers an axis below what the served claims resolve to,
                # and a claim of more risk it carries has taken effect at once.
                relayed = policy.resolve(item.get("annotations"), AnnotationTrust.TRUST, held_for_review=held)
                assert policy.axes_riskier(tool.axes, resolution.axes) == tool.axes.normalized()
                assert policy.axes_riskier(tool.axes, relayed.axes) == tool.axes.normalized()
    assert audit_verify_chain()[1] is None  # A2


@pytest.mark.django_db
def test_a_listing_that_repeats_a_name_is_the_documented_error_and_stores_nothing(
    trusted_server: Any,
) -> None:
    before = list(Tool.objects.filter(server=trusted_server).values())
    with pytest.raises(RegistryError):
        mcp_tools_record(
            server=trusted_server,
            listing=[{"name": "twice"}, {"name": "twice", "annotations": {"readOnlyHint": True}}],
            actor=TEST_ACTOR,
            complete=True,
        )
    assert list(Tool.objects.filter(server=trusted_server).values()) == before
    assert audit_verify_chain()[1] is None
