"""The API's one parser: JSON as DRF reads it, refusing a member named twice; and how a
member is named in errors.

Kept apart from `core.api`: DRF resolves its parser setting while importing its views, which
`core.api` imports."""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

from rest_framework import exceptions
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json as drf_json

# What makes a member's name unreadable as it stands in a message or a dotted path: nothing
# at all, white space at an end, control characters, or the path's own punctuation.
_NOT_PLAIN_NAME = re.compile(r'^$|^\s|\s$|[\x00-\x1f\x7f-\x9f."\[\]]')


def member_name(key: Any) -> str:
    """A body member's name as errors print it: as it is, or JSON-quoted where it would name
    nothing a person can find (the empty key is `""`, a space `" "`, `a.b` stays one name)."""
    name = str(key)
    return json.dumps(name, ensure_ascii=False) if _NOT_PLAIN_NAME.search(name) else name


DUPLICATE_KEY_MESSAGE = (
    "Given more than once in one object. Each member may appear once: readers that keep the "
    "first and readers that keep the last would disagree."
)


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refusing_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return found


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, refusing an object that names a member twice
    (`{"skills": ["a"], "skills": ["b"]}`): a 400 naming the member, where the standard
    library would keep the last and a gateway in front of us might keep the first."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = get_encoding(parser_context or {})
        try:
            return drf_json.load(
                codecs.getreader(encoding)(stream),
                parse_constant=drf_json.strict_constant if self.strict else None,
                object_pairs_hook=_refusing_duplicates,
            )
        except _DuplicateKey as exc:
            raise exceptions.ValidationError({member_name(exc.key): [DUPLICATE_KEY_MESSAGE]}) from None
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
