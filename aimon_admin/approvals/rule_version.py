"""The rule set's version, which each process's cached rule indexes (of skill rules and of
tool rules) key on.

The version is one row in the database, restamped in the same transaction as every rule
change (approvals/rules.py) and read (one primary-key lookup) by every evaluation, so a change
committed on one node is seen by the next decision on every node. A shared cache would cost
the same round trip and add a way to be stale.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import connection, models

from aimon_admin.approvals.models import RuleSetVersion

IndexT = TypeVar("IndexT")

_lock = threading.Lock()
_indexes: dict[type[models.Model], tuple[int, Any]] = {}


def rule_set_version_bump() -> None:
    """Restamp the version, inside the transaction of the rule change it announces."""
    # A fresh random stamp, not a counter: a rolled-back change's number would come round
    # again, and an index cached under it (read inside that transaction) would be stale.
    RuleSetVersion.objects.update_or_create(pk=1, defaults={"version": secrets.randbits(62) + 1})


def cached_index(
    model: type[models.Model], build: Callable[[], IndexT], version: int | None = None
) -> IndexT:
    """This process's index of the rules stored as `model`, made by `build` again only when
    the rule set changed anywhere. `version` is the rule set's version when the caller has
    just read it (the chains read it with the grants, in one round trip); otherwise it is
    read here."""
    if version is None:
        # Plain SQL: read on every decision, where the ORM's query building would dominate.
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT version FROM {RuleSetVersion._meta.db_table} WHERE id = 1")  # noqa: S608 - the model's table # nosec B608
            row = cursor.fetchone()
        version = row[0] if row else 0
    cached = _indexes.get(model)
    if cached is not None and cached[0] == version:
        return cached[1]
    with _lock:
        index = build()
        _indexes[model] = (version, index)
        return index


def rule_index_reset() -> None:
    """Forget this process's cached rule indexes, of skills and of tools: the next read of
    each builds it afresh. For tests (a rolled-back test's rules must not judge the next
    one) and for anything else that changed rules without bumping the version."""
    with _lock:
        _indexes.clear()
