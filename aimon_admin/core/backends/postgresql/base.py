"""Django's PostgreSQL backend, its pool a `dbpool.ReconnectingPool` (a reconnect back-off
with a cap; aimon_admin/core/dbpool.py). Everything else is Django's backend unchanged.

Django builds the psycopg pool itself (its options, its check: psycopg-pool's standard one
with CONN_HEALTH_CHECKS, its configure step) and takes no pool class. The pool is built
unopened; `ReconnectingPool` adds one method and no state, so the pool takes that class
before anything opens or uses it, and Django's construction is not copied here.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base

from aimon_admin.core import dbpool


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> Any:
        pool = super().pool
        # Every caller (opening it included) reads the pool through here, so none meets it
        # with the uncapped back-off.
        if pool is not None and type(pool) is not dbpool.ReconnectingPool:
            pool.__class__ = dbpool.ReconnectingPool
        return pool
