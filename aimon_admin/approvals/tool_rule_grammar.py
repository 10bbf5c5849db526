"""U1, U5: tool rules as pure code: the grammar an operator writes them in, `Tool(pattern)`
(`Bash(git status:*)`, `Bash` for the whole tool, `git/git_push(origin:*)` for an MCP
server's tool), and the index the tool chain finds the rules of one call in. Standard
library, enums, the registry's pure policy and subject_patterns.py only.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass

from aimon_admin.approvals.choices import RuleAction
from aimon_admin.approvals.subject_patterns import (
    SubjectPattern,
    literal_prefix,
    subject_pattern_problems,
    text_problems,
    whole_tool_allowed,
)
from aimon_admin.approvals.subjects import Subject, as_subject, read_as
from aimon_admin.registry.policy import ToolAxes

TOOL_NAME_MAX = 200
SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

TOOL_NAME_EMPTY = "Name the tool, e.g. Bash(git status:*) or git/git_push."
TOOL_NAME_TOO_LONG = "A tool name is at most {limit} characters; this has {length}."
TOOL_NAME_CONTROL = "No control characters in a tool name (one at position {position})."
TOOL_NAME_PARENS = "A tool name has no brackets: write the subject pattern in Tool(pattern)."
SERVER_NAME_BAD = "{server!r} is not an MCP server name: 1-100 letters, digits, dots, dashes or underscores."
RULE_TEXT_UNCLOSED = "A subject pattern is written in brackets after the tool: Tool(pattern)."
PATTERN_WHOLE_DESTRUCTIVE = (
    "This tool is destructive: an allow for it must name a subject pattern, never the whole tool."
)


def tool_name_problems(name: str) -> list[str]:
    if not name:
        return [TOOL_NAME_EMPTY]
    problems = text_problems(name, TOOL_NAME_MAX, TOOL_NAME_TOO_LONG, TOOL_NAME_CONTROL)
    if "(" in name or ")" in name:
        problems.append(TOOL_NAME_PARENS)
    return problems


@dataclass(frozen=True)
class RuleText:
    """`Tool(pattern)` parsed: a local tool by name, an MCP tool as `server/tool`."""

    server: str
    tool: str
    pattern: str

    def __str__(self) -> str:
        return rule_text(server=self.server, tool=self.tool, pattern=self.pattern)


class RuleTextError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__(" ".join(problems))
        self.problems = problems


def parse_rule_text(text: str) -> RuleText:
    """`Bash(git push:*)`, `Bash`, `git/git_push(origin:*)` → its parts; RuleTextError
    naming every problem otherwise. The first `(` opens the pattern, the last `)` closes it."""
    text = text.strip()
    if ("(" in text) != text.endswith(")"):
        raise RuleTextError([RULE_TEXT_UNCLOSED])
    head, _, pattern = text.removesuffix(")").partition("(")
    server, tool = head.split("/", 1) if "/" in head else ("", head)
    problems = tool_name_problems(tool)
    if "/" in head and not SERVER_NAME_RE.match(server):
        problems.append(SERVER_NAME_BAD.format(server=server))
    problems.extend(subject_pattern_problems(pattern))
    if problems:
        raise RuleTextError(problems)
    return RuleText(server=server, tool=tool, pattern=pattern)


def tool_label(*, server: str, tool: str) -> str:
    return f"{server}/{tool}" if server else tool


def rule_text(*, server: str, tool: str, pattern: str) -> str:
    label = tool_label(server=server, tool=tool)
    return f"{label}({pattern})" if pattern else label


# --- The index (U1, U5) -------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolRuleSpec:
    id: int
    runtime_id: int | None
    server: str
    tool: str
    pattern: str
    action: RuleAction
    unattended: bool = False
    approvers: int = 1  # P3: how many distinct people must allow what it asks about

    @property
    def text(self) -> str:
        return rule_text(server=self.server, tool=self.tool, pattern=self.pattern)


@dataclass(frozen=True)
class ToolRuleMatch:
    """The rules that match one call, by what they do (None where none matches)."""

    deny: ToolRuleSpec | None = None
    allow: ToolRuleSpec | None = None
    ask: ToolRuleSpec | None = None  # of those that ask, the one needing the most people
    pre_approval: ToolRuleSpec | None = None

    @property
    def floor(self) -> int:
        """P3: how many people's answer it takes to allow this call (1: any grant may)."""
        return self.ask.approvers if self.ask is not None else 1


def _precedence(rule: ToolRuleSpec) -> tuple[int, int, int]:
    # Most specific first: a pattern over the whole tool, a longer pattern, this runtime's.
    return (0 if rule.pattern else 1, -len(rule.pattern), 0 if rule.runtime_id is not None else 1)


class _ToolRules:
    """One tool's rules in precedence order, found by what a subject must begin with.

    A pattern matches only subjects that begin with its literal prefix (`literal_prefix`),
    so a call is matched against the rules whose prefix its subject begins with (one
    dictionary lookup per distinct prefix length), the exact patterns equal to it, and the
    rules with no literal prefix: not against every rule of the tool (benchmarks/tool_rules.py).
    """

    def __init__(self) -> None:
        self.rules: list[tuple[ToolRuleSpec, SubjectPattern]] = []
        self.always: list[int] = []  # the whole tool, or a pattern that opens with *
        self.exact: dict[str, list[int]] = {}  # no wildcard: equal subjects only
        self.by_prefix: dict[str, list[int]] = {}
        self.lengths: list[int] = []
        self.deny_patterns: list[int] = []  # U1: they deny a call whose subject is unreadable
        self.floors: list[int] = []  # P3: asks needing several people, which cover it too

    def add(self, rule: ToolRuleSpec) -> None:
        position = len(self.rules)
        self.rules.append((rule, SubjectPattern.compile(rule.pattern)))
        if rule.action == RuleAction.DENY and rule.pattern:
            self.deny_patterns.append(position)
        if rule.action == RuleAction.ASK and rule.approvers > 1:
            self.floors.append(position)
        prefix = literal_prefix(rule.pattern)
        if not prefix:
            self.always.append(position)
        elif prefix == rule.pattern:
            self.exact.setdefault(prefix, []).append(position)
        else:
            if prefix not in self.by_prefix and len(prefix) not in self.lengths:
                bisect.insort(self.lengths, len(prefix))
            self.by_prefix.setdefault(prefix, []).append(position)

    def candidates(self, texts: Iterable[str | None]) -> list[tuple[ToolRuleSpec, SubjectPattern]]:
        """The rules that may match a subject read as any of `texts` (its value, and for a
        path or a command what it reads as: normalised, or each simple command in it)."""
        found = set(self.always)
        for subject in texts:
            if subject is None:
                continue
            found.update(self.exact.get(subject, ()))
            for length in self.lengths:
                if length > len(subject):
                    break
                found.update(self.by_prefix.get(subject[:length], ()))
        return [self.rules[position] for position in sorted(found)]


class ToolRuleIndex:
    """Tool rules by (server, tool), each with its pattern compiled once."""

    def __init__(self, rules: Iterable[ToolRuleSpec]) -> None:
        self._by_tool: dict[tuple[str, str], _ToolRules] = {}
        for rule in sorted(rules, key=lambda r: (_precedence(r), r.id)):
            self._by_tool.setdefault((rule.server, rule.tool), _ToolRules()).add(rule)

    def __len__(self) -> int:
        return sum(len(bucket.rules) for bucket in self._by_tool.values())

    def match(
        self,
        *,
        runtime_id: int,
        server: str,
        tool: str,
        subject: Subject | str | None,
        axes: ToolAxes,
        unattended: bool,
    ) -> ToolRuleMatch:
        """Which rule of each kind applies to this call. An ALLOW rule (or pre-approval) for
        the whole of a destructive tool (or only wildcards) applies to nothing (U5: fail
        closed if it was saved before the tool turned out destructive); a pre-approval only
        to unattended calls of its own runtime. Of the rules that ask, the one needing the
        most people (the most specific of those): it is the floor (P3), and where it needs
        several no operator ALLOW rule or pre-approval answers the call."""
        bucket = self._by_tool.get((server, tool))
        if bucket is None:
            return ToolRuleMatch()
        subject = as_subject(subject)
        deny = allow = ask = pre = None
        whole_ok = whole_tool_allowed(axes)
        if not subject.readable:
            # U1, fail closed: a deny pattern denies a call whose subject is missing, not a
            # string, or cannot be read as its kind (no pattern can be matched against it);
            # a rule needing several people covers it too (P3).
            for position in (*bucket.deny_patterns, *bucket.floors):
                rule = bucket.rules[position][0]
                if rule.runtime_id is not None and rule.runtime_id != runtime_id:
                    continue
                if rule.action == RuleAction.DENY:
                    deny = deny or rule
                elif ask is None or rule.approvers > ask.approvers:
                    ask = rule
        for rule, compiled in bucket.candidates(read_as(subject)):
            if rule.runtime_id is not None and rule.runtime_id != runtime_id:
                continue
            if rule.action == RuleAction.DENY:
                if deny is None and compiled.matches(subject, for_allow=False):
                    deny = rule
            elif rule.action == RuleAction.ASK:
                if (ask is None or rule.approvers > ask.approvers) and compiled.matches(
                    subject, for_allow=False
                ):
                    ask = rule
            elif compiled.wholesale and not whole_ok:
                continue
            elif rule.unattended:
                if pre is None and unattended and compiled.matches(subject, for_allow=True):
                    pre = rule
            elif allow is None and compiled.matches(subject, for_allow=True):
                allow = rule
        if ask is not None and ask.approvers > 1:
            allow = pre = None  # P3: only people answer under the floor
        return ToolRuleMatch(deny=deny, allow=allow, ask=ask, pre_approval=pre)

    def floor_rules(self, *, runtime_id: int, server: str, tool: str, above: int) -> list[ToolRuleSpec]:
        """P3: this tool's rules (for this runtime) that need more than `above` people: what
        an answer by `above` people may not reach into."""
        bucket = self._by_tool.get((server, tool))
        if bucket is None:
            return []
        floors = (bucket.rules[position][0] for position in bucket.floors)
        return [rule for rule in floors if rule.approvers > above and rule.runtime_id in (None, runtime_id)]
