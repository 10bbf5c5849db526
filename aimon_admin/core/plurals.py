"""Messages with a count in them: one wording for exactly one, another for every other number
("1 approval removed", "0 approvals removed"), through Django's ngettext."""

from __future__ import annotations

from typing import Any

from django.utils.translation import ngettext

# (singular, plural): two str.format templates; `{count}` is the number that chooses between them.
Counted = tuple[str, str]


def counted(message: Counted, count: int, /, **values: Any) -> str:
    """`message` worded for `count`, its fields filled in (`count` among them)."""
    singular, plural = message
    return ngettext(singular, plural, count).format(count=count, **values)
