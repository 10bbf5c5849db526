"""Django's PostgreSQL backend, its pool a `dbpool.ReconnectingPool` (a reconnect back-off
with a cap; aimon_admin/core/dbpool.py), and a breaker in front of it. Everything else is
Django's backend unchanged.

Django builds the psycopg pool itself (its options, its check: psycopg-pool's standard one
with CONN_HEALTH_CHECKS, its configure step) and takes no pool class. The pool is built
unopened; `ReconnectingPool` adds one method and no state, so the pool takes that class
before anything opens or uses it, and Django's construction is not copied here.

The breaker. Once a connection could not be had (the database down: the pool waited its
whole timeout, or the server refused), every later request of this process is refused at
once with the same OperationalError (a 503 with Retry-After, never a decision) instead of
waiting the pool's timeout again, holding a web thread meanwhile. One probe thread per
process checks the pool every `PROBE_INTERVAL_SECONDS`, then borrows a connection (waiting
at most `PROBE_TIMEOUT_SECONDS`) and closes the breaker as soon as it gets one: with the pool
reconnecting at least once a second, requests are served again within about a second and
a half of the database's return.

The check comes first because the pool's idle connections all died with the server.
psycopg-pool's `getconn` meets them one at a time and, after each broken one, sleeps a
back-off that starts at a second and doubles: a probe borrowing alone discarded about one
dead connection a round, and a node with twenty idle connections came back 3 to 5 s after
the database did (benchmarks/outages.py). `pool.check()` tests every idle connection at
once, drops the dead ones and asks for their replacements, so what the probe borrows next
is a connection made after the database's return.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg
from django.db.backends.postgresql import base

from aimon_admin.core import dbpool

logger = logging.getLogger(__name__)

PROBE_INTERVAL_SECONDS = 0.25
PROBE_TIMEOUT_SECONDS = 1.0
DOWN_MESSAGE = "the database could not be reached a moment ago; refused at once until a probe reaches it"


class Breaker:
    """Open from a failed connection until a probe borrows one (per process, per pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = False
        self._probe: threading.Thread | None = None

    @property
    def open(self) -> bool:
        return self._open

    def failed(self, pool: Any) -> None:
        with self._lock:
            if not self._open:
                logger.error("database unreachable: refusing at once until a probe reaches it")
            self._open = True
            if self._probe is None or not self._probe.is_alive():
                self._probe = threading.Thread(
                    target=self._probing, args=(pool,), name="aimon-db-probe", daemon=True
                )
                self._probe.start()

    def _probing(self, pool: Any) -> None:
        while not pool.closed:  # a closed pool is replaced, with a breaker of its own
            try:
                pool.check()
                connection = pool.getconn(timeout=PROBE_TIMEOUT_SECONDS)
            except psycopg.Error:
                time.sleep(PROBE_INTERVAL_SECONDS)
                continue
            pool.putconn(connection)
            with self._lock:
                self._open = False
                self._probe = None
            logger.warning("database reachable again: serving")
            return
        with self._lock:
            self._probe = None


_breakers: dict[int, Breaker] = {}
_breakers_lock = threading.Lock()


def breaker_for(pool: Any) -> Breaker:
    with _breakers_lock:
        return _breakers.setdefault(id(pool), Breaker())


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> Any:
        pool = super().pool
        # Every caller (opening it included) reads the pool through here, so none meets it
        # with the uncapped back-off.
        if pool is not None and type(pool) is not dbpool.ReconnectingPool:
            pool.__class__ = dbpool.ReconnectingPool
        return pool

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        pool = self.pool
        if pool is None:
            return super().get_new_connection(conn_params)
        breaker = breaker_for(pool)
        if breaker.open:
            raise psycopg.OperationalError(DOWN_MESSAGE)  # Django raises it as its own
        try:
            return super().get_new_connection(conn_params)
        except psycopg.OperationalError:
            breaker.failed(pool)
            raise
