"""Plain words for the product's codes: what a page says instead of MUTATING.

The codes (`MUTATING`, `ABOVE_CEILING`, `SESSION` …) are the values of the TextChoices, the
same in the database, the API and the audit log; their labels are the words people read
("Writes", "Above this runtime's ceiling …", "This session"). A page rarely holds the enum
member itself: it holds the code as stored. So each app registers its enums here under a
kind ("level", "trust", "decision" …: a group of codes read alike, none with two words),
and `{% words value "level" %}` (core.templatetags.ui) turns a stored code back into its
words, with the exact code kept on hover. Core knows no app: apps register, one way, when
their choices module is imported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from django.db import models

UNKNOWN_KIND_MESSAGE = "No codes are registered as {kind!r}."
# The kind for a value that may or may not be a code, from no one place (an audit event's
# recorded details): the words when exactly one kind gives the code a meaning, else as it is.
ANY = "any"
TWO_WORDS_MESSAGE = "{code} means {old!r} and {new!r} under {kind!r}: a kind gives each code one meaning."


@dataclass
class Kind:
    """A group of codes read alike; `badge` names the badge a page shows them in (its class
    badge-<badge>, the code in data-<data>), empty for plain text."""

    words: dict[str, str] = field(default_factory=dict)
    badge: str = ""
    data: str = ""


_KINDS: dict[str, Kind] = {}


def register(kind: str, *enums: type[models.Choices], badge: str = "", data: str = "") -> None:
    """Add the enums' codes and labels to `kind` (made on first use). A badge given once holds
    for the kind; a code given two different words under one kind is refused."""
    entry = _KINDS.setdefault(kind, Kind())
    if badge:
        entry.badge, entry.data = badge, data or badge
    for enum in enums:
        for code, label in enum.choices:
            old = entry.words.get(code)
            if old is not None and old != label:
                raise ValueError(TWO_WORDS_MESSAGE.format(code=code, old=old, new=label, kind=kind))
            entry.words[code] = str(label)


def kind(name: str) -> Kind:
    if name == ANY:
        return _any()
    try:
        return _KINDS[name]
    except KeyError:
        raise LookupError(UNKNOWN_KIND_MESSAGE.format(kind=name)) from None


def _any() -> Kind:
    meanings: dict[str, set[str]] = {}
    for entry in _KINDS.values():
        for code, text in entry.words.items():
            meanings.setdefault(code, set()).add(text)
    return Kind(words={code: texts.pop() for code, texts in meanings.items() if len(texts) == 1})


def words_for(code: object, kind_name: str = "") -> str:
    """The words for a code: an enum member's label, else the code's words under `kind_name`;
    a code nobody registered is given back as it is (the page sweep then finds it)."""
    if isinstance(code, models.Choices):
        return str(code.label)
    text = "" if code is None else str(code)
    if not kind_name:
        return text
    return kind(kind_name).words.get(text, text)


def in_words(text: str, kind_name: str) -> str:
    """`text` with each code of `kind_name` in it (a whole word) replaced by its words in lower
    case: for prose stored with codes in it before pages said words ("undeclared: default
    MUTATING" reads "undeclared: default writes")."""
    known = kind(kind_name).words
    if not known or not text:
        return text
    pattern = "|".join(re.escape(code) for code in sorted(known, key=len, reverse=True))
    return re.sub(
        rf"(?<![A-Za-z0-9_])(?:{pattern})(?![A-Za-z0-9_])", lambda m: known[m.group(0)].lower(), text
    )
