"""U1: a call's subject read as its kind: a *command* as a POSIX shell would read it, a *path*
normalised. Pure functions, standard library only.

A command is split into words as the shell splits them (quotes and backslashes removed), into
one simple command per `;`, `&`, `|`, line break or bracket. What it reads tells two things:

* whether the command runs nothing but its own program (`plain`): one simple command, no
  substitution (`$(…)`, backquotes, `<(…)`), no expansion (`$NAME`, `${…}`, globs, braces,
  whose words the shell makes only when it runs), no redirection, no leading `NAME=value`,
  and none of the options its program uses to run another (`git -c`, `--upload-pack`,
  `find -exec`, …). Only a plain command matches a prefix allow: anything else asks.
* whether its programs can be told at all (`readable`): unbalanced quotes, a substitution, a
  program named by an expansion, or a program that runs another it is handed (`env`,
  `sudo`, `xargs`, `sh`, …) hide what runs. Where a tool has a deny pattern, a call whose
  command cannot be read is denied (fail closed).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from aimon_admin.registry.choices import SubjectKind

# Programs whose work is to run another program they are handed: what they run is a word
# like any other, so a command starting with one of them cannot be read as its program.
RUNS_ANOTHER = frozenset(
    [
        "env",
        "sudo",
        "doas",
        "su",
        "runuser",
        "pkexec",
        "xargs",
        "parallel",
        "sh",
        "bash",
        "dash",
        "zsh",
        "ksh",
        "mksh",
        "fish",
        "csh",
        "tcsh",
        "busybox",
        "eval",
        "exec",
        "command",
        "builtin",
        "nice",
        "nohup",
        "timeout",
        "time",
        "watch",
        "strace",
        "ltrace",
        "chroot",
        "setsid",
        "stdbuf",
        "ionice",
        "taskset",
        "chrt",
        "flock",
        "unshare",
        "nsenter",
        "script",
        "systemd-run",
        "firejail",
    ]
)

# Options with which a program runs another program (or a shell line) it is handed, by program;
# `*` for options that mean it for every program that has them. A long option also counts
# written as `--option=value`; a short one also with its value joined (`-cX`).
_RUNS_ANOTHER_OPTIONS: dict[str, frozenset[str]] = {
    "*": frozenset(
        [
            "--exec",
            "-exec",
            "-execdir",
            "-ok",
            "-okdir",
            "--upload-pack",
            "--receive-pack",
            "--exec-path",
            "--config-env",
            "--rsh",
            "--rsync-path",
            "--to-command",
            "--checkpoint-action",
            "--use-compress-program",
            "--info-script",
            "--new-volume-script",
            "--rsh-command",
            "--extcmd",
            "--open-files-in-pager",
            "--unzip-command",
            "--template",
            "--ext-diff",
            "--textconv",
            "--command",
            "--shell",
            "--eval",
            "--pager",
            "--editor",
        ]
    ),
    "git": frozenset(["-c", "-u", "-x", "-O"]),
    "tar": frozenset(["-I", "-F"]),
    "rsync": frozenset(["-e"]),
    "ssh": frozenset(["-o", "-F"]),
    "scp": frozenset(["-o", "-F", "-S"]),
    "sftp": frozenset(["-o", "-F", "-S"]),
    "zip": frozenset(["-TT"]),
}
# Subcommands that run a program or shell line given to them (`git submodule foreach …`).
_RUNS_ANOTHER_SUBCOMMANDS: dict[str, frozenset[str]] = {
    "git": frozenset(["submodule", "bisect", "filter-branch", "difftool", "mergetool"]),
}

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_EXPANSION_STARTS = frozenset("({_@*#?$!-'\"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_BREAKS = frozenset(";&|\n\r()")


@dataclass(frozen=True)
class Command:
    """A command as the shell would read it: the words of each simple command, and what
    besides plain words it holds."""

    readable: bool  # False: unbalanced quotes or a trailing backslash
    segments: tuple[tuple[str, ...], ...] = ()
    chained: bool = False  # ; & | line breaks, brackets
    substituted: bool = False  # $(…) `…` <(…) >(…)
    expanded: bool = False  # $NAME ${…} $'…' globs braces
    redirected: bool = False  # < >

    @property
    def words(self) -> tuple[str, ...]:
        return self.segments[0] if len(self.segments) == 1 else ()

    # Derived once per reading: `read_command` keeps recent readings, and a decision asks
    # each of them for every rule and grant it matches.
    @cached_property
    def programs_known(self) -> bool:
        """Whether every program the command runs can be told from its text (fail closed)."""
        if not self.readable or self.substituted:
            return False
        for words in self.segments:
            program = next((word for word in words if not _ASSIGNMENT.match(word)), None)
            if program is None or "$" in program or posixpath.basename(program) in RUNS_ANOTHER:
                return False
        return True

    @cached_property
    def plain(self) -> bool:
        """One simple command that runs nothing but its own program with the words shown."""
        if not self.readable or len(self.segments) != 1:
            return False
        if self.chained or self.substituted or self.expanded or self.redirected:
            return False
        words = self.segments[0]
        if not words or _ASSIGNMENT.match(words[0]):
            return False
        return not runs_another(words)

    @cached_property
    def simple_commands(self) -> tuple[str, ...]:
        """Each simple command's words joined by one space, with any leading `NAME=value`
        removed and the program named without its directory (`/bin/rm -rf x` is `rm -rf x`):
        what a deny pattern is matched against besides the whole text."""
        found = []
        for words in self.segments:
            rest = list(words)
            while rest and _ASSIGNMENT.match(rest[0]):
                rest.pop(0)
            if rest:
                found.append(" ".join([posixpath.basename(rest[0]), *rest[1:]]))
                found.append(" ".join(words))
        return tuple(found)


def runs_another(words: tuple[str, ...]) -> bool:
    """Whether a simple command's program is handed another program to run: by one of its
    options, a subcommand that runs what it is given, or by being such a program itself."""
    program = posixpath.basename(words[0])
    if program in RUNS_ANOTHER:
        return True
    options = _RUNS_ANOTHER_OPTIONS["*"] | _RUNS_ANOTHER_OPTIONS.get(program, frozenset())
    subcommands = _RUNS_ANOTHER_SUBCOMMANDS.get(program, frozenset())
    for word in words[1:]:
        if word in subcommands:
            return True
        name = word.split("=", 1)[0] if word.startswith("--") else word
        if name in options:
            return True
        if not word.startswith("--") and any(
            len(option) == 2 and word.startswith(option) for option in options
        ):
            return True
    return False


@lru_cache(maxsize=4096)
def read_command(text: str) -> Command:
    """`text` read as a POSIX shell reads a command line (no expansion is performed)."""
    segments: list[tuple[str, ...]] = []
    words: list[str] = []
    word: list[str] = []
    in_word = False
    flags = {"chained": False, "substituted": False, "expanded": False, "redirected": False}

    def end_word() -> None:
        nonlocal word, in_word
        if in_word:
            words.append("".join(word))
        word, in_word = [], False

    def end_segment() -> None:
        nonlocal words
        end_word()
        if words:
            segments.append(tuple(words))
        words = []

    def dollar(at: int) -> None:
        following = text[at + 1 : at + 2]
        if following == "(":
            flags["substituted"] = True
        elif following and following in _EXPANSION_STARTS:
            flags["expanded"] = True

    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == "'":
            end = text.find("'", i + 1)
            if end == -1:
                return Command(readable=False)
            word.append(text[i + 1 : end])
            in_word, i = True, end + 1
        elif char == '"':
            i += 1
            while i < n and text[i] != '"':
                inner = text[i]
                if inner == "\\" and i + 1 < n and text[i + 1] in '$`"\\\n':
                    word.append(text[i + 1])
                    i += 2
                    continue
                if inner == "`":
                    flags["substituted"] = True
                elif inner == "$":
                    dollar(i)
                word.append(inner)
                i += 1
            if i >= n:
                return Command(readable=False)
            in_word, i = True, i + 1
        elif char == "\\":
            if i + 1 >= n:
                return Command(readable=False)
            if text[i + 1] != "\n":  # a backslash and a line break join two lines
                word.append(text[i + 1])
                in_word = True
            i += 2
        elif char in " \t":
            end_word()
            i += 1
        elif char in _BREAKS:
            flags["chained"] = True
            end_segment()
            i += 1
        elif char in "<>":
            if text[i + 1 : i + 2] == "(":
                flags["substituted"] = True
            flags["redirected"] = True
            end_word()
            i += 1
        elif char == "`":
            flags["substituted"] = True
            word.append(char)
            in_word, i = True, i + 1
        elif char == "#" and not in_word:
            end = text.find("\n", i)  # a comment runs to the end of its line
            i = n if end == -1 else end
        else:
            if char == "$":
                dollar(i)
            elif char in "*?[{":
                flags["expanded"] = True
            word.append(char)
            in_word, i = True, i + 1
    end_segment()
    return Command(readable=True, segments=tuple(segments), **flags)


# --- The subject of a call ------------------------------------------------------------------------

SUBJECT_NOT_NAMED = "This tool has no subject argument, so only rules for the whole tool apply."
SUBJECT_ABSENT = (
    "The subject argument {name!r} is absent, so only rules for the whole tool apply "
    "(and a deny pattern of the tool denies the call)."
)
SUBJECT_NOT_TEXT = (
    "The subject argument {name!r} is not a string, so only rules for the whole tool apply "
    "(and a deny pattern of the tool denies the call)."
)
SUBJECT_UNREADABLE = {
    SubjectKind.COMMAND: (
        "The command in {name!r} cannot be read for what it runs (unbalanced quotes, a "
        "substitution, or a program that runs another): no prefix allow covers it, and where "
        "the tool has a deny pattern, it is denied."
    ),
    SubjectKind.PATH: (
        "The path in {name!r} names nothing: where the tool has a deny pattern, it is denied."
    ),
}


@dataclass(frozen=True)
class Subject:
    """A call's subject: the string value of the tool's subject argument, read as its kind
    (U1), or None with a note saying why there is none (given in the decision's answer).

    `readable` is False where there is no value, or the value cannot be read as its kind
    (a command whose programs cannot be told, a path that names nothing): then every deny
    pattern of the tool matches it (fail closed)."""

    value: str | None
    note: str = ""
    kind: SubjectKind = SubjectKind.TEXT

    @property
    def readable(self) -> bool:
        if self.value is None:
            return False
        if self.kind == SubjectKind.COMMAND:
            return read_command(self.value).programs_known
        if self.kind == SubjectKind.PATH:
            return normalise_path(self.value) is not None
        return True


def subject_of(
    arguments: Mapping[str, Any] | None, argument: str, kind: SubjectKind = SubjectKind.TEXT
) -> Subject:
    if not argument:
        return Subject(None, SUBJECT_NOT_NAMED, kind)
    if not arguments or argument not in arguments:
        return Subject(None, SUBJECT_ABSENT.format(name=argument), kind)
    value = arguments[argument]
    if not isinstance(value, str):
        return Subject(None, SUBJECT_NOT_TEXT.format(name=argument), kind)
    subject = Subject(value, kind=kind)
    if not subject.readable:
        return Subject(value, SUBJECT_UNREADABLE[kind].format(name=argument), kind)
    return subject


def as_subject(subject: Subject | str | None) -> Subject:
    """A subject as given, or a text one for a bare value (the pure functions take either)."""
    return subject if isinstance(subject, Subject) else Subject(subject)


def read_as(subject: Subject) -> tuple[str | None, ...]:
    """The texts a subject's patterns are matched against: its value, and what it reads as."""
    if subject.value is None:
        return ()
    if subject.kind == SubjectKind.PATH:
        return (subject.value, normalise_path(subject.value))
    if subject.kind == SubjectKind.COMMAND:
        return (subject.value, *read_command(subject.value).simple_commands)
    return (subject.value,)


# --- Paths ---------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def normalise_path(text: str) -> str | None:
    """A path with `.`, `..` and repeated slashes resolved as written (`/tmp/../etc//passwd`
    is `/etc/passwd`), or None where it names nothing (empty, or a NUL in it)."""
    if not text or "\x00" in text:
        return None
    return posixpath.normpath(re.sub(r"/+", "/", text))
