"""Django's PostgreSQL backend, with the pool of aimon_admin/core/dbpool.py: its borrow
check, and its reconnect back-off with a cap.

Django builds the psycopg pool itself and passes it either psycopg-pool's own check (a
round trip on every borrow) or none, and refuses a `check` among the pool options. This
backend builds the pool as Django 5.2 does (same options, same configure step) with the
socket-first check instead, as a `dbpool.ReconnectingPool`. Everything else is Django's backend unchanged.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base

from aimon_admin.core import dbpool


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> Any:
        pool_options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not pool_options:
            return None
        if self.alias not in self._connection_pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            connect_kwargs = self.get_connection_params()
            connect_kwargs["autocommit"] = True  # as Django: it sets the mode itself later
            pool = dbpool.ReconnectingPool(
                kwargs=connect_kwargs,
                open=False,
                configure=self._configure_connection,
                check=dbpool.check_connection,
                **({} if pool_options is True else pool_options),
            )
            self._connection_pools.setdefault(self.alias, pool)
        return self._connection_pools[self.alias]
