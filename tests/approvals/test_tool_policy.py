"""Part U of docs/rules.md as pure functions (approvals/subject_patterns.py,
tool_rule_grammar.py and tool_policy.py): tables, no database.

The grammar of `Tool(pattern)`, what a subject pattern matches for an ALLOW and for a DENY
(shell metacharacters, `..` steps, word ends), the arguments' problems and their canonical
digest, the subject, the patterns an approver is offered, the rule index and the chain.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aimon_admin.approvals.choices import GrantDecision, RuleAction, ToolCallSource
from aimon_admin.approvals.subject_patterns import (
    literal_prefix,
    pattern_choices,
    pattern_is_wholesale,
    subject_matches,
    whole_tool_allowed,
)
from aimon_admin.approvals.subjects import (
    SUBJECT_ABSENT,
    SUBJECT_NOT_NAMED,
    SUBJECT_NOT_TEXT,
    Subject,
    subject_of,
)
from aimon_admin.approvals.tool_answers import deny_patterns
from aimon_admin.approvals.tool_policy import (
    ARGUMENTS_BIG_INTEGER,
    ARGUMENTS_MAX_BYTES,
    ARGUMENTS_NOT_FINITE,
    ARGUMENTS_NOT_OBJECT,
    ARGUMENTS_TOO_DEEP,
    HeldToolGrant,
    ToolLayers,
    arguments_digest,
    arguments_problem,
    layer_decision,
    tool_chain_decide,
)
from aimon_admin.approvals.tool_rule_grammar import (
    RULE_TEXT_UNCLOSED,
    TOOL_NAME_EMPTY,
    TOOL_NAME_PARENS,
    RuleText,
    RuleTextError,
    ToolRuleIndex,
    ToolRuleMatch,
    ToolRuleSpec,
    parse_rule_text,
    rule_text,
)
from aimon_admin.registry.choices import (
    DestructiveBehavior,
    GateReason,
    IdempotencyBehavior,
    SideEffectLevel,
    SubjectKind,
    ToolDecision,
)
from aimon_admin.registry.policy import UNREGISTERED, GateResult, ToolAxes
from tests.fuzzing import budget

READS = ToolAxes(SideEffectLevel.READ_ONLY, DestructiveBehavior.DESTRUCTIVE, IdempotencyBehavior.IDEMPOTENT)
WRITES = ToolAxes(
    SideEffectLevel.MUTATING, DestructiveBehavior.NON_DESTRUCTIVE, IdempotencyBehavior.NON_IDEMPOTENT
)
DESTROYS = ToolAxes(
    SideEffectLevel.MUTATING, DestructiveBehavior.DESTRUCTIVE, IdempotencyBehavior.NON_IDEMPOTENT
)


# --- The grammar: Tool(pattern) (U1) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("Bash(git status:*)", RuleText("", "Bash", "git status:*")),
        ("Bash", RuleText("", "Bash", "")),
        ("Bash()", RuleText("", "Bash", "")),
        ("  Bash(ls)  ", RuleText("", "Bash", "ls")),
        ("git/git_push(origin:*)", RuleText("git", "git_push", "origin:*")),
        ("git/git_push", RuleText("git", "git_push", "")),
        ("Read(/srv/app/*)", RuleText("", "Read", "/srv/app/*")),
        # The first ( opens the pattern and the last ) closes it: brackets inside are literal.
        ("Bash(echo (hi))", RuleText("", "Bash", "echo (hi)")),
    ],
)
def test_rule_text_parses(text: str, parsed: RuleText) -> None:
    # U1: `Tool(pattern)`, a local tool by name, an MCP tool as server/tool.
    assert parse_rule_text(text) == parsed
    # And it is written back the same way (an empty pattern: the bare tool name).
    assert parse_rule_text(str(parsed)) == parsed


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", TOOL_NAME_EMPTY),
        ("   ", TOOL_NAME_EMPTY),
        ("(git:*)", TOOL_NAME_EMPTY),
        ("Bash(git:*", RULE_TEXT_UNCLOSED),
        ("Bash git:*)", RULE_TEXT_UNCLOSED),
        ("Ba)sh", TOOL_NAME_PARENS),
        ("Bash(x\x1by)", "No control characters in a subject pattern (one at position 2)"),
        ("Bash(x\ny)", "No control characters in a subject pattern"),
        ("Bash(x\u200by)", "No control characters in a subject pattern"),  # a zero-width space (Cf)
        ("Ba\x00sh", "No control characters in a tool name (one at position 3)"),
        ("Bash(git **)", "No runs of **"),
        ("Bash(" + "x" * 301 + ")", "at most 300 characters; this has 301"),
        ("B" * 201, "at most 200 characters; this has 201"),
        ("bad server!/tool", "is not an MCP server name"),
        ("/tool", "is not an MCP server name"),
    ],
)
def test_rule_text_off_the_grammar_names_the_problem(text: str, problem: str) -> None:
    # Bad input: control characters or an empty tool name are refused at save.
    with pytest.raises(RuleTextError) as caught:
        parse_rule_text(text)
    assert any(problem in each for each in caught.value.problems), caught.value.problems


def test_a_tool_name_has_no_brackets() -> None:
    # The first ( opens the pattern, so a ) before it is in the tool's name: refused.
    with pytest.raises(RuleTextError) as caught:
        parse_rule_text("Ba)sh(x)")
    assert caught.value.problems == [TOOL_NAME_PARENS]
    assert parse_rule_text("Ba(sh)(x)") == RuleText("", "Ba", "sh)(x")


def test_rule_text_writes_the_bare_tool_for_the_whole_tool() -> None:
    assert rule_text(server="", tool="Bash", pattern="") == "Bash"
    assert rule_text(server="git", tool="git_push", pattern="origin:*") == "git/git_push(origin:*)"


# --- Matching (U1): ALLOW fails closed, DENY matches at least what it says ------------------------

MATCH_CASES = [
    # pattern, subject, matches for an ALLOW, matches for a DENY
    ("git status:*", "git status", True, True),
    ("git status:*", "git status -s", True, True),
    ("git status:*", "git statusx", False, True),  # an ALLOW's prefix ends at a word's end
    ("git status:*", "git stat", False, False),
    ("git status:*", "Git status", False, False),  # case counts
    ("git status:*", " git status", False, False),  # whole string, from the start
    ("git push:*", "git push origin main && rm -rf /", False, True),  # shell metacharacters
    ("git push:*", "git push origin main; rm -rf /", False, True),
    ("git push:*", "git push origin main | sh", False, True),
    ("git push:*", "git push $(curl evil)", False, True),
    ("git push:*", "git push `curl evil`", False, True),
    ("git push:*", "git push > /etc/passwd", False, True),
    ("git push:*", "git push < /dev/zero", False, True),
    ("git push:*", "git push origin\nrm -rf /", False, True),  # a line break
    ("git push:*", "git push origin\rrm -rf /", False, True),
    ("git push:*", "git push origin main &", False, True),
    ("rm:*", "rm -rf /", True, True),
    ("rm:*", "rmdir x", False, True),  # a DENY's prefix covers longer words
    ("/srv/app/*", "/srv/app/config.yml", True, True),
    ("/srv/app/*", "/srv/app/../../etc/passwd", False, True),  # a `..` step
    ("/srv/app/*", "/srv/app/..", False, True),
    ("/srv/app/../shared/*", "/srv/app/../shared/x", True, True),  # a `..` the operator wrote
    ("/srv/app/../shared/*", "/srv/app/../shared/../../x", False, True),
    ("/srv/*/logs", "/srv/web/logs", True, True),
    ("/srv/*/logs", "/srv/web/logs/x", False, False),
    ("/srv/*/logs", "/srv/a;b/logs", False, True),
    ("make test", "make test", True, True),  # no wildcard: exactly this
    ("make test", "make test2", False, False),
    ("make test", "make testx", False, False),
    ("a; b", "a; b", True, True),  # written out by the operator: literal, not a wildcard
    ("*", "anything at all", True, True),
    ("*", "a && b", False, True),
    ("*.py", "main.py", True, True),
    ("*.py", "main.pyc", False, False),
    ("git push:*", "", False, False),
    ("ls:*", "ls\t-la", True, True),
]


@pytest.mark.parametrize(("pattern", "subject", "allow", "deny"), MATCH_CASES)
def test_subject_patterns_match(pattern: str, subject: str, allow: bool, deny: bool) -> None:
    # U1, U3, U5
    assert subject_matches(pattern, subject, for_allow=True) is allow
    assert subject_matches(pattern, subject, for_allow=False) is deny


@pytest.mark.parametrize("for_allow", [True, False])
def test_the_whole_tool_matches_every_call_and_a_pattern_needs_a_text_subject(for_allow: bool) -> None:
    # U1: an absent or non-text subject matches no pattern, only the whole tool.
    assert subject_matches("", None, for_allow=for_allow)
    assert subject_matches("", "rm -rf / && x", for_allow=for_allow)
    assert not subject_matches("*", None, for_allow=for_allow)
    assert not subject_matches("rm:*", None, for_allow=for_allow)


# --- The subject (U1) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "argument", "value", "note"),
    [
        ({"command": "ls"}, "command", "ls", ""),
        ({"command": ""}, "command", "", ""),
        ({"command": "ls"}, "", None, SUBJECT_NOT_NAMED),
        ({}, "command", None, SUBJECT_ABSENT.format(name="command")),
        (None, "command", None, SUBJECT_ABSENT.format(name="command")),
        ({"cmd": "ls"}, "command", None, SUBJECT_ABSENT.format(name="command")),
        ({"command": ["ls"]}, "command", None, SUBJECT_NOT_TEXT.format(name="command")),
        ({"command": 7}, "command", None, SUBJECT_NOT_TEXT.format(name="command")),
        ({"command": None}, "command", None, SUBJECT_NOT_TEXT.format(name="command")),
    ],
)
def test_the_subject_is_the_named_arguments_text(
    arguments: dict[str, Any] | None, argument: str, value: str | None, note: str
) -> None:
    subject = subject_of(arguments, argument)
    assert (subject.value, subject.note) == (value, note)


# --- The arguments and their digest (U2, U4) ----------------------------------------------------


def _json(text: str) -> Any:
    return json.loads(text)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ('{"a": 1, "b": 2}', '{"b": 2, "a": 1}'),  # reordered keys
        ('{"a": 1.0}', '{"a": 1}'),  # another spelling of the same number
        ('{"a": 1e2}', '{"a": 100}'),
        ('{"a": {"y": [1, {"q": 1, "p": 2}], "x": null}}', '{"a": {"x": null, "y": [1, {"p": 2, "q": 1}]}}'),
        ('{"a": "\\u00e9"}', '{"a": "é"}'),  # an escape and the character itself
        ('{ "a" :\n 1 }', '{"a":1}'),  # whitespace between tokens
    ],
)
def test_the_digest_is_canonical(first: str, second: str) -> None:
    # U4: RFC 8785, so the runtime and the server agree however the JSON was written.
    assert arguments_digest(_json(first)) == arguments_digest(_json(second))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            '{"command": "git push origin main"}',
            '{"command": "git push origin  main"}',
        ),  # whitespace in a value
        ('{"command": "ls"}', '{"command": "ls "}'),
        ('{"a": 1}', '{"a": "1"}'),
        ('{"a": [1, 2]}', '{"a": [2, 1]}'),  # list order counts
        ('{"a": 1}', '{"a": 1, "b": null}'),
        ('{"a": "x"}', '{"A": "x"}'),
    ],
)
def test_any_changed_value_changes_the_digest(first: str, second: str) -> None:
    # U4: what ran is what was approved.
    assert arguments_digest(_json(first)) != arguments_digest(_json(second))


def test_the_digest_is_sha256_of_the_canonical_json() -> None:
    # The runtime API's contract: `sha256:` + hex, recomputable by the runtime.
    import hashlib

    expected = hashlib.sha256(b'{"a":1,"b":"x"}').hexdigest()
    assert arguments_digest({"b": "x", "a": 1.0}) == f"sha256:{expected}"


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ([], ARGUMENTS_NOT_OBJECT),
        ("ls", ARGUMENTS_NOT_OBJECT),
        (None, ARGUMENTS_NOT_OBJECT),
        (7, ARGUMENTS_NOT_OBJECT),
        ({"a": float("nan")}, ARGUMENTS_NOT_FINITE),
        ({"a": [1, float("inf")]}, ARGUMENTS_NOT_FINITE),
        (_json('{"a": 1e999}'), ARGUMENTS_NOT_FINITE),  # JSON text Python reads as infinity
        ({"a": 2**53}, ARGUMENTS_BIG_INTEGER.format(where="arguments.a")),
        ({"a": {"b": ["\ud800"]}}, "a lone surrogate (\\ud800-\\udfff) at arguments.a.b[0]"),
        ({"\udfff": 1}, "a lone surrogate (\\ud800-\\udfff) at arguments, a key"),
        (_nested(33), ARGUMENTS_TOO_DEEP.format(limit=32)),
        ({"a": "x" * ARGUMENTS_MAX_BYTES}, f"At most {ARGUMENTS_MAX_BYTES} bytes as canonical JSON"),
    ],
)
def test_arguments_unfit_for_a_call_name_the_problem(arguments: Any, problem: str) -> None:
    # Bad input: not an object, over 64 KiB, too deep, non-JSON numbers, lone surrogates.
    found = arguments_problem(arguments)
    assert found is not None
    assert problem in found


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"command": "ls"},
        {"a": 2**53 - 1, "b": -(2**53 - 1), "c": 0.5, "d": True, "e": None, "f": [1, "x", {}]},
        _nested(32),
        {"a": "é€😀"},
        {"a": "x" * (ARGUMENTS_MAX_BYTES - 10)},  # {"a":"…"} is 8 bytes more: just fits
    ],
)
def test_fit_arguments_have_no_problem_and_a_digest(arguments: Any) -> None:
    assert arguments_problem(arguments) is None
    assert arguments_digest(arguments).startswith("sha256:")


# --- The patterns offered to an approver (U3) ----------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "axes", "choices"),
    [
        (
            "git push origin main",
            WRITES,
            ["git push origin main", "git push origin:*", "git push:*", "git:*", ""],
        ),
        (
            "git push origin main",
            DESTROYS,
            ["git push origin main", "git push origin:*", "git push:*", "git:*"],
        ),
        (
            "git push origin main",
            UNREGISTERED,
            ["git push origin main", "git push origin:*", "git push:*", "git:*"],
        ),
        ("ls", WRITES, ["ls", ""]),
        ("a b c d e", WRITES, ["a b c d e", "a b c:*", "a b:*", "a:*", ""]),  # at most three prefixes
        (None, WRITES, [""]),
        (None, DESTROYS, []),  # a destructive tool without a subject: one call at a time
        ("", WRITES, [""]),
        ("rm *", DESTROYS, ["rm:*"]),  # a literal * cannot be written as an exact pattern
        ("x\x1by", DESTROYS, []),
        ("x" * 301, DESTROYS, []),
        ("ls", READS, ["ls", ""]),  # read-only: never destructive (T5)
    ],
)
def test_pattern_choices(subject: str | None, axes: ToolAxes, choices: list[str]) -> None:
    assert pattern_choices(subject, axes) == choices


@pytest.mark.parametrize(
    "subject",
    [
        "git push origin main",
        "ls",
        "rm -rf /tmp/x",
        "cat ../x",
        "git push origin main && rm -rf /",
        "a | b c",
    ],
)
def test_every_offered_pattern_allows_the_call_it_was_offered_for(subject: str) -> None:
    # U3: a prefix that would not cover the call asked about (a chained command, a `..` step)
    # is not offered for an allow: `git push:*` allows nothing of `git push x && rm -rf /`.
    for pattern in pattern_choices(subject, WRITES):
        assert subject_matches(pattern, subject, for_allow=True), (pattern, subject)


def test_a_deny_may_still_pick_the_prefix_of_a_chained_command() -> None:
    subject = "git push origin main && rm -rf /"
    assert pattern_choices(subject, DESTROYS) == [subject]
    assert deny_patterns(subject, DESTROYS) == [subject, "git push origin:*", "git push:*", "git:*", ""]


@pytest.mark.parametrize(
    ("axes", "allowed"), [(READS, True), (WRITES, True), (DESTROYS, False), (UNREGISTERED, False)]
)
def test_the_whole_of_a_destructive_or_unregistered_tool_is_never_allowed(
    axes: ToolAxes, allowed: bool
) -> None:
    # U3, U5, T9
    assert whole_tool_allowed(axes) is allowed


# --- The rule index (U1, U5) --------------------------------------------------------------------

RUNTIME, OTHER = 1, 2


def _rule(
    id: int, text: str, action: RuleAction, runtime: int | None = None, unattended: bool = False
) -> ToolRuleSpec:
    parsed = parse_rule_text(text)
    return ToolRuleSpec(id, runtime, parsed.server, parsed.tool, parsed.pattern, action, unattended)


INDEX = ToolRuleIndex(
    [
        _rule(1, "Bash(rm:*)", RuleAction.DENY),
        _rule(2, "Bash(git:*)", RuleAction.ALLOW),
        _rule(3, "Bash(git push:*)", RuleAction.ASK),
        _rule(4, "Bash(git push --force:*)", RuleAction.DENY, runtime=RUNTIME),
        _rule(5, "Bash(make nightly)", RuleAction.ALLOW, runtime=RUNTIME, unattended=True),
        _rule(6, "Bash", RuleAction.ALLOW, runtime=OTHER),
        _rule(7, "git/git_push(origin:*)", RuleAction.ALLOW),
        _rule(8, "Bash(git status:*)", RuleAction.ALLOW, runtime=RUNTIME),
    ]
)


def _ids(found: ToolRuleMatch) -> tuple[int | None, ...]:
    return tuple(
        rule.id if rule else None for rule in (found.deny, found.allow, found.ask, found.pre_approval)
    )


@pytest.mark.parametrize(
    ("runtime", "server", "subject", "axes", "unattended", "ids"),
    [
        (RUNTIME, "", "rm -rf /", WRITES, False, (1, None, None, None)),
        (RUNTIME, "", "git log", WRITES, False, (None, 2, None, None)),
        # The most specific ALLOW first: this runtime's longer pattern.
        (RUNTIME, "", "git status", WRITES, False, (None, 8, None, None)),
        (OTHER, "", "git status", WRITES, False, (None, 2, None, None)),
        (RUNTIME, "", "git push origin", WRITES, False, (None, 2, 3, None)),
        (RUNTIME, "", "git push --force origin", WRITES, False, (4, 2, 3, None)),
        (OTHER, "", "git push --force origin", WRITES, False, (None, 2, 3, None)),  # another runtime's DENY
        (
            RUNTIME,
            "",
            "make nightly",
            WRITES,
            False,
            (None, None, None, None),
        ),  # a pre-approval: unattended only
        (RUNTIME, "", "make nightly", WRITES, True, (None, None, None, 5)),
        (OTHER, "", "make nightly", WRITES, True, (None, 6, None, None)),  # runtime 6: the whole Bash
        (
            OTHER,
            "",
            "make nightly",
            DESTROYS,
            True,
            (None, None, None, None),
        ),  # never wholesale when destructive
        # U1, fail closed: no subject, so the first deny pattern that applies denies.
        (RUNTIME, "", None, WRITES, False, (4, None, None, None)),
        (OTHER, "", None, WRITES, False, (1, 6, None, None)),
        (RUNTIME, "git", "origin main", WRITES, False, (None, None, None, None)),  # another tool: Bash on git
    ],
)
def test_the_index_finds_each_kind_of_rule(
    runtime: int,
    server: str,
    subject: str | None,
    axes: ToolAxes,
    unattended: bool,
    ids: tuple[int | None, ...],
) -> None:
    found = INDEX.match(
        runtime_id=runtime, server=server, tool="Bash", subject=subject, axes=axes, unattended=unattended
    )
    assert _ids(found) == ids


def test_an_mcp_tools_rules_are_its_own() -> None:
    found = INDEX.match(
        runtime_id=RUNTIME,
        server="git",
        tool="git_push",
        subject="origin main",
        axes=WRITES,
        unattended=False,
    )
    assert _ids(found) == (None, 7, None, None)
    local = INDEX.match(
        runtime_id=RUNTIME, server="", tool="git_push", subject="origin main", axes=WRITES, unattended=False
    )
    assert _ids(local) == (None, None, None, None)


# --- Grants at one layer (U3) -------------------------------------------------------------------


def test_a_layers_deny_beats_its_allow_and_a_destructive_tool_is_never_allowed_whole() -> None:
    allow_git = HeldToolGrant(1, GrantDecision.ALLOW, "git:*")
    deny_push = HeldToolGrant(2, GrantDecision.DENY, "git push:*")
    whole = HeldToolGrant(3, GrantDecision.ALLOW, "")
    assert layer_decision([allow_git, deny_push], "git push x", WRITES) == deny_push
    assert layer_decision([allow_git, deny_push], "git log", WRITES) == allow_git
    assert layer_decision([allow_git], "git log && rm -rf /", WRITES) is None
    assert layer_decision([whole], "rm -rf /", WRITES) == whole
    assert layer_decision([whole], "rm -rf /", DESTROYS) is None
    assert layer_decision([whole], None, UNREGISTERED) is None


# --- The chain (U, T8, U5) ----------------------------------------------------------------------

GATE_ASK = GateResult(ToolDecision.ASK, GateReason.DESTRUCTIVE_ALWAYS_ASKS)
GATE_ALLOW = GateResult(ToolDecision.ALLOW, GateReason.EXEMPT_AT_OR_BELOW)
GATE_CEILING = GateResult(ToolDecision.DENY, GateReason.ABOVE_CEILING)
DENY_RULE = _rule(1, "Bash(rm:*)", RuleAction.DENY)
ALLOW_RULE = _rule(2, "Bash(git:*)", RuleAction.ALLOW)
ASK_RULE = _rule(3, "Bash(git push:*)", RuleAction.ASK)
PRE = _rule(4, "Bash(make nightly)", RuleAction.ALLOW, runtime=RUNTIME, unattended=True)
SESSION_ALLOW = HeldToolGrant(10, GrantDecision.ALLOW, "rm x")
AGENT_DENY = HeldToolGrant(11, GrantDecision.DENY, "")

CHAIN_CASES = [
    # layers, attended, (decision, reason, source)
    (ToolLayers(GATE_CEILING, ToolRuleMatch(allow=ALLOW_RULE), call_approved=True), True,
     (ToolDecision.DENY, GateReason.ABOVE_CEILING, ToolCallSource.CEILING)),
    # An operator's DENY beats every human answer (U1).
    (ToolLayers(GATE_ASK, ToolRuleMatch(deny=DENY_RULE), call_approved=True, session=SESSION_ALLOW), True,
     (ToolDecision.DENY, GateReason.DENIED_BY_RULE, ToolCallSource.RULE)),
    (ToolLayers(GATE_ASK, ToolRuleMatch(ask=ASK_RULE), call_approved=True, agent=AGENT_DENY), True,
     (ToolDecision.ALLOW, GateReason.GRANTED, ToolCallSource.CALL)),
    (ToolLayers(GATE_ASK, session=SESSION_ALLOW, agent=AGENT_DENY), True,
     (ToolDecision.ALLOW, GateReason.GRANTED, ToolCallSource.SESSION)),
    (ToolLayers(GATE_ASK, ToolRuleMatch(allow=ALLOW_RULE), agent=AGENT_DENY), True,
     (ToolDecision.DENY, GateReason.DENIED, ToolCallSource.AGENT)),
    (ToolLayers(GATE_ASK, ToolRuleMatch(allow=ALLOW_RULE, ask=ASK_RULE)), True,
     (ToolDecision.ALLOW, GateReason.ALLOWED_BY_RULE, ToolCallSource.RULE)),
    (ToolLayers(GATE_ALLOW, ToolRuleMatch(ask=ASK_RULE)), True,
     (ToolDecision.ASK, GateReason.ASKED_BY_RULE, ToolCallSource.RULE)),
    (ToolLayers(GATE_ASK), True, (ToolDecision.ASK, GateReason.DESTRUCTIVE_ALWAYS_ASKS, ToolCallSource.GATE)),
    (ToolLayers(GATE_ALLOW), False, (ToolDecision.ALLOW, GateReason.EXEMPT_AT_OR_BELOW, ToolCallSource.GATE)),
    # Unattended: a question is DENY unless a pre-approval answers it (T8, U5).
    (ToolLayers(GATE_ASK), False, (ToolDecision.DENY, GateReason.UNATTENDED_NO_CHANNEL, ToolCallSource.GATE)),
    (ToolLayers(GATE_ASK, ToolRuleMatch(pre_approval=PRE)), False,
     (ToolDecision.ALLOW, GateReason.PRE_APPROVED, ToolCallSource.RULE)),
    (ToolLayers(GATE_ALLOW, ToolRuleMatch(ask=ASK_RULE, pre_approval=PRE)), False,
     (ToolDecision.ALLOW, GateReason.PRE_APPROVED, ToolCallSource.RULE)),
    (ToolLayers(GATE_ASK, ToolRuleMatch(deny=DENY_RULE, pre_approval=PRE)), False,
     (ToolDecision.DENY, GateReason.DENIED_BY_RULE, ToolCallSource.RULE)),
    # Attended, a person answers: the pre-approval is not theirs.
    (ToolLayers(GATE_ASK, ToolRuleMatch(pre_approval=PRE)), True,
     (ToolDecision.ASK, GateReason.DESTRUCTIVE_ALWAYS_ASKS, ToolCallSource.GATE)),
]  # fmt: skip


@pytest.mark.parametrize(("layers", "attended", "verdict"), CHAIN_CASES)
def test_the_chain_decides_in_order(layers: ToolLayers, attended: bool, verdict: tuple[Any, ...]) -> None:
    found = tool_chain_decide(layers, attended=attended)
    assert (found.decision, found.reason, found.source) == verdict


# --- Wildcards only: the whole tool in all but name (U3, U5) ------------------------------------


@pytest.mark.parametrize(
    ("pattern", "wholesale"),
    [("", True), ("*", True), (":*", True), ("*:*", True), ("a*", False), ("*a", False), ("git:*", False)],
)
def test_a_pattern_of_only_wildcards_is_wholesale(pattern: str, wholesale: bool) -> None:
    assert pattern_is_wholesale(pattern) is wholesale


@pytest.mark.parametrize("pattern", ["", "*", ":*", "*:*"])
def test_an_allow_of_only_wildcards_never_answers_for_a_destructive_tool(pattern: str) -> None:
    # U3, U5: never wholesale, whether the rule or grant says so or only means it.
    index = ToolRuleIndex(
        [
            ToolRuleSpec(1, None, "", "Bash", pattern, RuleAction.ALLOW),
            ToolRuleSpec(2, RUNTIME, "", "Bash", pattern, RuleAction.ALLOW, unattended=True),
        ]
    )
    for axes, expected in ((DESTROYS, (None, None)), (WRITES, (1, 2))):
        found = index.match(
            runtime_id=RUNTIME, server="", tool="Bash", subject="rm -rf /", axes=axes, unattended=True
        )
        assert _ids(found)[1::2] == expected
    grant = HeldToolGrant(3, GrantDecision.ALLOW, pattern)
    assert layer_decision([grant], "rm -rf /", DESTROYS) is None
    assert layer_decision([grant], "rm -rf /", WRITES) == grant


# --- The index finds what reading every rule would (its lookup by literal prefix) ---------------


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [
        ("git push:*", "git push"),
        ("/srv/*/logs", "/srv/"),
        ("make test", "make test"),
        ("*.py", ""),
        ("", ""),
    ],
)
def test_literal_prefix(pattern: str, prefix: str) -> None:
    assert literal_prefix(pattern) == prefix


def brute_force_match(
    rules: list[ToolRuleSpec],
    *,
    runtime_id: int,
    tool: str,
    subject: str | None,
    axes: ToolAxes,
    unattended: bool,
    kind: SubjectKind = SubjectKind.TEXT,
) -> ToolRuleMatch:
    """Every rule of the tool, in precedence order, each read in full: what the index must find."""
    ordered = sorted(
        (rule for rule in rules if rule.tool == tool and rule.runtime_id in (None, runtime_id)),
        key=lambda r: (0 if r.pattern else 1, -len(r.pattern), 0 if r.runtime_id is not None else 1, r.id),
    )
    found: dict[str, ToolRuleSpec] = {}
    if not Subject(subject, kind=kind).readable:  # U1: fail closed
        denies = [rule for rule in ordered if rule.action == RuleAction.DENY and rule.pattern]
        if denies:
            found["deny"] = denies[0]
    for rule in ordered:
        if rule.action == RuleAction.DENY:
            which, for_allow = "deny", False
        elif rule.action == RuleAction.ASK:
            which, for_allow = "ask", False
        elif pattern_is_wholesale(rule.pattern) and not whole_tool_allowed(axes):
            continue
        elif rule.unattended:
            if not unattended:
                continue
            which, for_allow = "pre_approval", True
        else:
            which, for_allow = "allow", True
        if which not in found and subject_matches(rule.pattern, subject, for_allow=for_allow, kind=kind):
            found[which] = rule
    return ToolRuleMatch(**found)


PATTERN_PARTS = ["git", " ", "push", "*", ":*", "/srv", "/", "..", "a", "-", ";", "&&"]
SUBJECT_PARTS = ["git", " ", "push", "origin", "/srv", "/", "..", "a", "-", ";", "&&", "x", "*"]
raw_rules = st.lists(
    st.tuples(
        st.lists(st.sampled_from(PATTERN_PARTS), max_size=5).map("".join),
        st.sampled_from(list(RuleAction)),
        st.sampled_from([None, RUNTIME, OTHER]),
        st.booleans(),
        st.sampled_from(["Bash", "Read"]),
    ),
    max_size=25,
)
subjects = st.lists(
    st.one_of(st.none(), st.lists(st.sampled_from(SUBJECT_PARTS), max_size=7).map("".join)), max_size=12
)


@budget(300)
@given(raw_rules, subjects, st.sampled_from([WRITES, DESTROYS]), st.booleans(), st.sampled_from(SubjectKind))
def test_the_index_finds_what_reading_every_rule_finds(  # U1
    raw: list[tuple[str, RuleAction, int | None, bool, str]],
    subjects: list[str | None],
    axes: ToolAxes,
    unattended: bool,
    kind: SubjectKind,
) -> None:
    rules = []
    for number, (pattern, action, runtime, pre, tool) in enumerate(raw, start=1):
        if "**" in pattern:
            continue  # off the grammar: never saved
        pre = pre and action == RuleAction.ALLOW and runtime is not None
        rules.append(ToolRuleSpec(number, runtime, "", tool, pattern, action, pre))
    index = ToolRuleIndex(rules)
    for subject in subjects:
        for runtime_id in (RUNTIME, OTHER):
            call: dict[str, Any] = {
                "runtime_id": runtime_id,
                "tool": "Bash",
                "axes": axes,
                "unattended": unattended,
            }
            found = index.match(server="", subject=Subject(subject, kind=kind), **call)
            assert found == brute_force_match(rules, subject=subject, kind=kind, **call), (
                subject,
                runtime_id,
            )


def test_the_index_looks_at_the_rules_a_subject_could_match_only() -> None:
    # 1,000 rules on one tool: a subject is read against those whose literal prefix it
    # begins with, not all of them (benchmarks/tool_rules.py times it).
    rules = [
        ToolRuleSpec(n, None, "", "Bash", f"cmd{n} {'xy'[n % 2]}:*", RuleAction.DENY) for n in range(1000)
    ]
    bucket = ToolRuleIndex(rules)._by_tool["", "Bash"]
    assert len(bucket.candidates(["cmd17 x now"])) + len(bucket.candidates(["cmd17 y now"])) == 1
    assert bucket.candidates(["nothing like it"]) == []
