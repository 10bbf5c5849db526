"""U1, U3: a tool call's subject patterns as pure functions: what a pattern matches for an
allow and for a deny, what an allow of it covers, and the patterns an approver may pick.
Standard library, enums, the registry's pure policy and subjects.py only. The rules written
as `Tool(pattern)` are tool_rule_grammar.py's; the chain that reads both is tool_policy.py's.

A pattern is matched against the subject's whole string value. `*` stands for any run of
characters; a trailing `:*` means "this prefix, then anything" (the prefix alone matches
too: `git push:*` matches `git push` and `git push origin main`). No other character is
special. An empty pattern stands for the whole tool, whatever the subject.

Fail closed: where an ALLOW (a rule, a grant) is matched, a wildcard never stands for the
characters that chain, substitute or redirect shell commands (; & | ` $ < > and line
breaks) nor for a `..` step of a path: `git push:*` does not allow
`git push origin main && rm -rf /`, which asks instead; and an ALLOW's prefix ends where a
word ends (`git push:*` does not allow `git pushx`). A DENY's wildcard stands for anything
and its prefix covers longer words (`rm:*` denies `rmdir` too): a DENY matches at least
what it says.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from aimon_admin.approvals.subjects import RUNS_ANOTHER, Subject, as_subject, normalise_path, read_command
from aimon_admin.registry.choices import DestructiveBehavior, SubjectKind
from aimon_admin.registry.policy import ToolAxes

SUBJECT_PATTERN_MAX = 300  # approvals.models.SUBJECT_PATTERN_MAX (a unique index holds it)

SUBJECT_PATTERN_TOO_LONG = "A subject pattern is at most {limit} characters; this has {length}."
SUBJECT_PATTERN_CONTROL = "No control characters in a subject pattern (one at position {position})."
SUBJECT_PATTERN_STARS = "No runs of **: one * already matches any run of characters (at position {position})."


def text_problems(text: str, limit: int, too_long: str, control: str) -> list[str]:
    """A name's or a pattern's length over `limit` (`too_long`, given the limit and the
    length) and its first control or format character (`control`, given its position from 1)."""
    problems = [too_long.format(limit=limit, length=len(text))] if len(text) > limit else []
    for position, char in enumerate(text, start=1):
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            problems.append(control.format(position=position))
            break
    return problems


def subject_pattern_problems(pattern: str) -> list[str]:
    """What is wrong with a subject pattern, each problem named once; empty if none. The
    empty pattern (the whole tool) is valid here; whether it may allow is decided apart."""
    problems = text_problems(pattern, SUBJECT_PATTERN_MAX, SUBJECT_PATTERN_TOO_LONG, SUBJECT_PATTERN_CONTROL)
    stars = pattern.find("**")
    if stars != -1:
        problems.append(SUBJECT_PATTERN_STARS.format(position=stars + 1))
    return problems


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
    """A compiled subject pattern (see the grammar at the top of this module)."""

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
