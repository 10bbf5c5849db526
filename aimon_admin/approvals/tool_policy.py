"""Part U of docs/rules.md as pure functions: a tool call's subject, argument rules, the
canonical digest an *Allow this call* is bound to, and the order of the tool chain. Standard
library, enums, the registry's pure policy and `rfc8785` (the JSON Canonicalization Scheme)
only.

The chain (U, first match wins): ceiling → operator DENY rules → this call's approval →
turn → session → invoking session → agent grants → operator ALLOW / ASK rules → the gate →
ASK; an unattended ASK becomes DENY unless a pre-approval answers it (T8, U5).
"""

from __future__ import annotations

import bisect
import hashlib
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import rfc8785

from aimon_admin.approvals.choices import GrantDecision, RuleAction, ToolCallSource
from aimon_admin.approvals.subjects import (
    RUNS_ANOTHER,
    Subject,
    as_subject,
    normalise_path,
    read_as,
    read_command,
)
from aimon_admin.registry.choices import DestructiveBehavior, GateReason, SubjectKind, ToolDecision
from aimon_admin.registry.policy import GateResult, ToolAxes

# --- The arguments (U2, U4) --------------------------------------------------------------------

ARGUMENTS_MAX_BYTES = 64 * 1024  # of the canonical JSON
ARGUMENTS_MAX_DEPTH = 32

ARGUMENTS_NOT_OBJECT = 'Must be a JSON object of the call\'s arguments, e.g. {"command": "ls"}.'
ARGUMENTS_TOO_LARGE = "At most {limit} bytes as canonical JSON; these are {size}."
ARGUMENTS_TOO_DEEP = "Nested deeper than {limit} levels."
ARGUMENTS_NOT_FINITE = "Numbers must be finite: NaN and infinities (such as 1e999) are not JSON."
ARGUMENTS_BIG_INTEGER = "Whole numbers must lie within ±(2^53 - 1) to have one canonical form (at {where})."
ARGUMENTS_SURROGATE = "Text must be valid Unicode: a lone surrogate (\\ud800-\\udfff) at {where}."


def _walk_problem(value: Any, depth: int, where: str) -> str | None:
    if depth > ARGUMENTS_MAX_DEPTH:
        return ARGUMENTS_TOO_DEEP.format(limit=ARGUMENTS_MAX_DEPTH)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else ARGUMENTS_NOT_FINITE
    if isinstance(value, int):
        return None if abs(value) <= 2**53 - 1 else ARGUMENTS_BIG_INTEGER.format(where=where)
    if isinstance(value, str):
        return ARGUMENTS_SURROGATE.format(where=where) if _has_surrogate(value) else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return ARGUMENTS_NOT_OBJECT
            if _has_surrogate(key):
                return ARGUMENTS_SURROGATE.format(where=f"{where}, a key")
            problem = _walk_problem(item, depth + 1, f"{where}.{key}")
            if problem:
                return problem
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = _walk_problem(item, depth + 1, f"{where}[{index}]")
            if problem:
                return problem
        return None
    return ARGUMENTS_NOT_OBJECT


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= char <= "\udfff" for char in text)


def arguments_problem(arguments: Any) -> str | None:
    """What makes `arguments` unfit to be a call's arguments, or None.

    They must be a JSON object whose canonical form (RFC 8785) exists and is at most 64 KiB:
    finite numbers, integers a double holds exactly, valid Unicode, a sane depth."""
    if not isinstance(arguments, Mapping):
        return ARGUMENTS_NOT_OBJECT
    problem = _walk_problem(arguments, 1, "arguments")
    if problem:
        return problem
    size = len(rfc8785.dumps(arguments))
    if size > ARGUMENTS_MAX_BYTES:
        return ARGUMENTS_TOO_LARGE.format(limit=ARGUMENTS_MAX_BYTES, size=size)
    return None


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """U3/U4: `sha256:` and the hex SHA-256 of the arguments' RFC 8785 canonical JSON, so
    reordered keys or another spelling of the same number give the same digest, and any
    changed value (whitespace inside a string included) gives another. Call only on
    arguments `arguments_problem` passed."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(dict(arguments))).hexdigest()


# --- Subject patterns (U1, U3) ------------------------------------------------------------------
#
# A pattern is matched against the subject's whole string value. `*` stands for any run of
# characters; a trailing `:*` means "this prefix, then anything" (the prefix alone matches
# too: `git push:*` matches `git push` and `git push origin main`). No other character is
# special. An empty pattern stands for the whole tool, whatever the subject.
#
# Fail closed: where an ALLOW (a rule, a grant) is matched, a wildcard never stands for the
# characters that chain, substitute or redirect shell commands (; & | ` $ < > and line
# breaks) nor for a `..` step of a path: `git push:*` does not allow
# `git push origin main && rm -rf /`, which asks instead; and an ALLOW's prefix ends where a
# word ends (`git push:*` does not allow `git pushx`). A DENY's wildcard stands for anything
# and its prefix covers longer words (`rm:*` denies `rmdir` too): a DENY matches at least
# what it says.

SUBJECT_PATTERN_MAX = 300  # approvals.models.SUBJECT_PATTERN_MAX (a unique index holds it)

TOOL_NAME_MAX = 200
SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

SUBJECT_PATTERN_TOO_LONG = "A subject pattern is at most {limit} characters; this has {length}."
SUBJECT_PATTERN_CONTROL = "No control characters in a subject pattern (one at position {position})."
SUBJECT_PATTERN_STARS = "No runs of **: one * already matches any run of characters (at position {position})."
TOOL_NAME_EMPTY = "Name the tool, e.g. Bash(git status:*) or git/git_push."
TOOL_NAME_TOO_LONG = "A tool name is at most {limit} characters; this has {length}."
TOOL_NAME_CONTROL = "No control characters in a tool name (one at position {position})."
TOOL_NAME_PARENS = "A tool name has no brackets: write the subject pattern in Tool(pattern)."
SERVER_NAME_BAD = "{server!r} is not an MCP server name: 1-100 letters, digits, dots, dashes or underscores."
RULE_TEXT_UNCLOSED = "A subject pattern is written in brackets after the tool: Tool(pattern)."
PATTERN_WHOLE_DESTRUCTIVE = (
    "This tool is destructive: an allow for it must name a subject pattern, never the whole tool."
)


def _control_position(text: str) -> int | None:
    for position, char in enumerate(text, start=1):
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            return position
    return None


def tool_name_problems(name: str) -> list[str]:
    if not name:
        return [TOOL_NAME_EMPTY]
    problems: list[str] = []
    if len(name) > TOOL_NAME_MAX:
        problems.append(TOOL_NAME_TOO_LONG.format(limit=TOOL_NAME_MAX, length=len(name)))
    position = _control_position(name)
    if position is not None:
        problems.append(TOOL_NAME_CONTROL.format(position=position))
    if "(" in name or ")" in name:
        problems.append(TOOL_NAME_PARENS)
    return problems


def subject_pattern_problems(pattern: str) -> list[str]:
    """What is wrong with a subject pattern, each problem named once; empty if none. The
    empty pattern (the whole tool) is valid here; whether it may allow is decided apart."""
    problems: list[str] = []
    if len(pattern) > SUBJECT_PATTERN_MAX:
        problems.append(SUBJECT_PATTERN_TOO_LONG.format(limit=SUBJECT_PATTERN_MAX, length=len(pattern)))
    position = _control_position(pattern)
    if position is not None:
        problems.append(SUBJECT_PATTERN_CONTROL.format(position=position))
    stars = pattern.find("**")
    if stars != -1:
        problems.append(SUBJECT_PATTERN_STARS.format(position=stars + 1))
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
    head, pattern = text, ""
    if "(" in text:
        if not text.endswith(")"):
            raise RuleTextError([RULE_TEXT_UNCLOSED])
        head, pattern = text[: text.index("(")], text[text.index("(") + 1 : -1]
    elif text.endswith(")"):
        raise RuleTextError([RULE_TEXT_UNCLOSED])
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


_ALLOW_RUN = r"[^;&|`$<>\r\n]*"
_DENY_RUN = r".*"


def _compile(pattern: str, *, for_allow: bool) -> re.Pattern[str]:
    run = _ALLOW_RUN if for_allow else _DENY_RUN
    body, tail = (pattern[:-2], run) if pattern.endswith(":*") else (pattern, "")
    if tail and for_allow and body[-1:].isalnum():
        # An ALLOW's prefix ends at a word's end: `git push:*` is not `git pushx`.
        tail = r"(?:[^\w;&|`$<>\r\n]" + run + ")?"
    return re.compile(run.join(re.escape(part) for part in body.split("*")) + tail, re.DOTALL)


@dataclass(frozen=True)
class SubjectPattern:
    """A compiled subject pattern (see the grammar above)."""

    text: str
    _allow: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    _deny: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    # `prefix:*` with no other wildcard: the prefix's words, which a command's first words
    # must be (U1: a prefix matches whole words only).
    _words: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def compile(cls, text: str) -> SubjectPattern:
        if not text:
            return cls(text)
        body = text.removesuffix(":*")
        words = tuple(body.split()) if body != text and "*" not in body else None
        return cls(text, _compile(text, for_allow=True), _compile(text, for_allow=False), words)

    @property
    def whole_tool(self) -> bool:
        return not self.text

    @property
    def wholesale(self) -> bool:
        """The whole tool, or only wildcards (`*`, `:*`, `*:*`): every text subject."""
        return pattern_is_wholesale(self.text)

    def matches(self, subject: Subject | str | None, *, for_allow: bool) -> bool:
        """Whether a call with this subject falls under the pattern. The whole tool matches
        every call; any other pattern only a subject with a value, read as its kind (U1):

        * a path is normalised first (`/tmp/../etc/passwd` is `/etc/passwd`); a deny also
          matches it as written;
        * a command's deny matches the whole text or any simple command in it (the program
          without its directory, leading `NAME=value` left out: `rm:*` denies
          `ls; /bin/rm -rf /`); a command's allow with a wildcard matches only a plain
          command (one program, nothing it runs besides: `subjects.Command.plain`), and a
          prefix by whole words (`git push:*` is `git push …`, never `git pushx`);
        * text is matched as written."""
        if self._allow is None or self._deny is None:
            return True
        subject = as_subject(subject)
        value = subject.value
        if value is None:
            return False
        if subject.kind == SubjectKind.PATH:
            normal = normalise_path(value)
            if not for_allow:
                return any(self._deny.fullmatch(text) for text in (value, normal) if text is not None)
            if normal is None:
                return False
            value = normal
        elif subject.kind == SubjectKind.COMMAND:
            if not for_allow:
                texts = (value, *read_command(value).simple_commands)
                return any(self._deny.fullmatch(text) for text in texts)
            if "*" in self.text:
                command = read_command(value)
                if not command.plain:
                    return False
                if self._words is not None:
                    if command.words[: len(self._words)] != self._words:
                        return False
                    return value.count("..") <= self.text.count("..")
        if not for_allow:
            return self._deny.fullmatch(value) is not None
        if self._allow.fullmatch(value) is None:
            return False
        # A `..` can straddle a literal part and a wildcard, so it is counted on the whole:
        # an ALLOW matches a path step up only where the operator wrote it themselves.
        return value.count("..") <= self.text.replace("*", "").count("..")


def pattern_is_wholesale(pattern: str) -> bool:
    """U3, U5: whether a pattern stands for every call of its tool: none, or nothing but
    wildcards (`*`, `:*`, `*:*` allow every text subject). As an allow, such a pattern is the
    whole tool in all but name, so never for a destructive tool."""
    return not pattern.removesuffix(":*").replace("*", "")


def literal_prefix(pattern: str) -> str:
    """What every subject a pattern matches begins with (for an allow and a deny alike):
    its text up to the first wildcard."""
    body = pattern.removesuffix(":*")
    star = body.find("*")
    return body if star == -1 else body[:star]


def may_reach_into(choice: str, floor: str, kind: SubjectKind = SubjectKind.TEXT) -> bool:
    """P3: whether an allow of `choice` may reach a call that the rule pattern `floor`
    covers (matched as an ASK is: the whole text, and for a command each simple command in
    it). Errs toward yes: two patterns with a wildcard may share a call unless neither's
    literal prefix begins the other's; a command's prefix is compared with its program's
    directory left out too (`/usr/bin/git:*` reaches `git push:*`)."""
    if not choice or not floor:
        return True
    if "*" not in choice:
        return SubjectPattern.compile(floor).matches(Subject(choice, kind=kind), for_allow=False)
    mine = literal_prefix(choice)
    theirs = literal_prefix(floor)
    forms = {mine}
    if kind == SubjectKind.COMMAND and "/" in mine.split(" ", 1)[0]:
        program, _, rest = mine.partition(" ")
        forms.add(" ".join(filter(None, (program.rsplit("/", 1)[1], rest))))
    if kind == SubjectKind.PATH:
        forms.add(normalise_path(mine) or mine)
    return any(form.startswith(theirs) or theirs.startswith(form) for form in forms)


def pattern_within(inner: str, outer: str) -> bool:
    """P3: whether every call an allow of `inner` covers is one the rule pattern `outer`
    covers (matched as an ASK is). Errs toward no: only the whole tool, or a `prefix:*` that
    begins everything `inner` matches, is known to hold it."""
    if not outer:
        return True
    body = outer.removesuffix(":*")
    if body == outer or "*" in body or not inner:
        return False
    return literal_prefix(inner).startswith(body)


def subject_matches(
    pattern: str, subject: str | None, *, for_allow: bool, kind: SubjectKind = SubjectKind.TEXT
) -> bool:
    return SubjectPattern.compile(pattern).matches(Subject(subject, kind=kind), for_allow=for_allow)


def whole_tool_allowed(axes: ToolAxes) -> bool:
    """U3, U5: a DESTRUCTIVE tool is never allowed wholesale (its grants and ALLOW rules
    carry a pattern); an unregistered tool counts as destructive (T9)."""
    return axes.effective_destructive != DestructiveBehavior.DESTRUCTIVE


def pattern_choices(
    subject: str | None,
    axes: ToolAxes,
    *,
    for_allow: bool = True,
    kind: SubjectKind = SubjectKind.TEXT,
    beyond: Sequence[str] = (),
) -> list[str]:
    """The patterns an approver may pick for a session or agent answer (U3), narrowest
    first: the exact value (a path normalised), then its word prefixes as `prefix:*`, then
    (unless destructive) the whole tool as "". A subject too long for a pattern offers only
    its prefixes. For an allow, only patterns that allow this very call: a prefix never
    covers a chained command or a `..` step (`git push:*` is not offered for
    `git push x && rm -rf /`), so what the approver picks always answers the call they were
    asked about. A command's prefixes are its first words as a shell splits them, never a
    program that runs another (`env:*`, `sudo:*`), and on a destructive tool never one word
    alone (`git:*` would allow every git command: `git push:*` is offered, not `git:*`).
    `beyond`: the patterns of rules that need more people than this answer has (P3); an
    allow is never offered that may reach what they cover."""
    choices: list[str] = []
    exact = normalise_path(subject) if subject is not None and kind == SubjectKind.PATH else subject
    if exact and not subject_pattern_problems(exact) and "*" not in exact:
        choices.append(exact)
    for prefix in _prefixes(subject, axes, kind):
        if prefix and "*" not in prefix and not subject_pattern_problems(prefix):
            pattern = f"{prefix}:*"
            if not for_allow or subject_matches(pattern, subject, for_allow=True, kind=kind):
                choices.append(pattern)
    if whole_tool_allowed(axes):
        choices.append("")
    if for_allow and beyond:
        choices = [c for c in choices if not any(may_reach_into(c, floor, kind) for floor in beyond)]
    return choices


def _prefixes(subject: str | None, axes: ToolAxes, kind: SubjectKind) -> list[str]:
    """The word prefixes a pattern may be made of, longest first (at most three words)."""
    if not subject or kind == SubjectKind.PATH:
        return []
    if kind == SubjectKind.COMMAND:
        command = read_command(subject)
        words = list(command.words) if command.plain else []
        if not words or words[0] in RUNS_ANOTHER or any(not word or " " in word for word in words[:3]):
            return []
        fewest = 1 if whole_tool_allowed(axes) else 2
    else:
        words = subject.split(" ")
        fewest = 1
    return [" ".join(words[:count]) for count in range(min(len(words) - 1, 3), fewest - 1, -1)]


# --- Tool rules (U1, U5) ------------------------------------------------------------------------


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
        found = []
        for position in bucket.floors:
            rule = bucket.rules[position][0]
            if rule.approvers > above and rule.runtime_id in (None, runtime_id):
                found.append(rule)
        return found


# --- Grants held for a tool (U3) ----------------------------------------------------------------


@dataclass(frozen=True)
class HeldToolGrant:
    """A tool grant in force at some layer: its decision and subject pattern."""

    id: int
    decision: GrantDecision
    pattern: str
    approvers: int = 1  # P3: how many people's answer wrote it


def layer_decision(
    grants: Iterable[HeldToolGrant], subject: Subject | str | None, axes: ToolAxes, *, floor: int = 1
) -> HeldToolGrant | None:
    """What one layer (turn, session, invoking session, agent) holds for this call: a
    matching DENY beats a matching ALLOW in the same layer (a DENY with a pattern matches a
    subject that cannot be read: U1, fail closed), an ALLOW of the whole of a destructive
    tool applies to nothing (U3: never granted wholesale), nor does an ALLOW fewer people
    gave than the call's `floor` needs (P3)."""
    subject = as_subject(subject)
    allowed: HeldToolGrant | None = None
    whole_ok = whole_tool_allowed(axes)
    for grant in grants:
        compiled = SubjectPattern.compile(grant.pattern)
        if grant.decision == GrantDecision.DENY:
            if compiled.matches(subject, for_allow=False) or (grant.pattern and not subject.readable):
                return grant
        elif (
            allowed is None
            and grant.approvers >= floor
            and (whole_ok or not compiled.wholesale)
            and compiled.matches(subject, for_allow=True)
        ):
            allowed = grant
    return allowed


# --- The chain (U) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolLayers:
    """Everything the chain reads for one call, gathered by the service."""

    gate: GateResult  # registry.policy.gate_decision(..., attended=True): the chain itself applies T8
    rules: ToolRuleMatch = ToolRuleMatch()
    call_approved: bool = False  # U4/U6: a valid, unused *Allow this call* was presented
    turn: HeldToolGrant | None = None
    session: HeldToolGrant | None = None
    invoking_session: HeldToolGrant | None = None
    agent: HeldToolGrant | None = None


@dataclass(frozen=True)
class ToolVerdict:
    decision: ToolDecision
    reason: GateReason
    source: ToolCallSource
    rule: ToolRuleSpec | None = None
    grant: HeldToolGrant | None = None


def tool_chain_decide(layers: ToolLayers, *, attended: bool) -> ToolVerdict:
    """U: ceiling → DENY rules → this call's approval → turn → session → invoking session →
    agent → ALLOW / ASK rules → the gate; an unattended question is DENY unless a
    pre-approval answers it, and nothing else turns it into ALLOW (U5)."""
    if layers.gate.reason == GateReason.ABOVE_CEILING:
        return ToolVerdict(ToolDecision.DENY, GateReason.ABOVE_CEILING, ToolCallSource.CEILING)
    if layers.rules.deny is not None:
        return ToolVerdict(
            ToolDecision.DENY, GateReason.DENIED_BY_RULE, ToolCallSource.RULE, rule=layers.rules.deny
        )
    if layers.call_approved:
        return ToolVerdict(ToolDecision.ALLOW, GateReason.GRANTED, ToolCallSource.CALL)
    for held, source in (
        (layers.turn, ToolCallSource.TURN),
        (layers.session, ToolCallSource.SESSION),
        (layers.invoking_session, ToolCallSource.INVOKING_SESSION),
        (layers.agent, ToolCallSource.AGENT),
    ):
        if held is not None:
            if held.decision == GrantDecision.ALLOW:
                return ToolVerdict(ToolDecision.ALLOW, GateReason.GRANTED, source, grant=held)
            return ToolVerdict(ToolDecision.DENY, GateReason.DENIED, source, grant=held)
    if layers.rules.allow is not None:
        return ToolVerdict(
            ToolDecision.ALLOW, GateReason.ALLOWED_BY_RULE, ToolCallSource.RULE, rule=layers.rules.allow
        )
    if layers.rules.ask is not None:
        asked = ToolVerdict(ToolDecision.ASK, layers.gate.reason, ToolCallSource.RULE, rule=layers.rules.ask)
        if layers.gate.decision == ToolDecision.ALLOW:
            asked = ToolVerdict(
                ToolDecision.ASK, GateReason.ASKED_BY_RULE, ToolCallSource.RULE, rule=layers.rules.ask
            )
    elif layers.gate.decision != ToolDecision.ASK:
        return ToolVerdict(layers.gate.decision, layers.gate.reason, ToolCallSource.GATE)
    else:
        asked = ToolVerdict(ToolDecision.ASK, layers.gate.reason, ToolCallSource.GATE)
    if attended:
        return asked
    if layers.rules.pre_approval is not None:
        return ToolVerdict(
            ToolDecision.ALLOW, GateReason.PRE_APPROVED, ToolCallSource.RULE, rule=layers.rules.pre_approval
        )
    return ToolVerdict(ToolDecision.DENY, GateReason.UNATTENDED_NO_CHANNEL, asked.source, rule=asked.rule)
