"""The product's PostgreSQL pool: psycopg-pool's, with a cap on its reconnect back-off.

A connection is checked before a request borrows it by psycopg-pool's standard check
(`ConnectionPool.check_connection`, an empty query), which Django passes with
CONN_HEALTH_CHECKS: connections left broken by a database restart are replaced, not lent.
(A socket-first check that skipped that round trip was measured in make prod's topology
and bought nothing: server CPU per decision x0.99 against the standard check,
benchmarks/specials.py, 2026-12-01. It was removed.)

Reconnecting. psycopg-pool replaces a lost connection in the background, retrying with an
exponential back-off that doubles up to the pool's `reconnect_timeout` (5 min): after a long
outage the next attempt could come half a minute after PostgreSQL was back, and every request
meanwhile answered 503. `ReconnectingPool` caps the delay between two attempts at
`RECONNECT_MAX_DELAY_SECONDS`, so a node serves again within about a second of the database's
return, whatever the outage's length. While the database is down that costs one refused
connection attempt a second per missing connection: nothing for a server to notice.
psycopg-pool has no option for the cap: the subclass hands its own attempt object to the
pool's `_add_connection` (the one method that creates one; read in psycopg-pool 3.3.3, the
pinned version, and pinned by tests/core/test_dbpool_backoff.py and
tests/faults/test_postgres_long_outage.py).
"""

from __future__ import annotations

from psycopg_pool import ConnectionPool
from psycopg_pool.base import AttemptWithBackoff

RECONNECT_MAX_DELAY_SECONDS = 1.0


class CappedBackoff(AttemptWithBackoff):
    """psycopg-pool's reconnect back-off, its delay never longer than the cap."""

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_MAX_DELAY_SECONDS)


class ReconnectingPool(ConnectionPool):
    """psycopg-pool's pool, reconnecting at least once a second while the database is gone."""

    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        # The pool makes a fresh attempt when given none, then passes the same one along to
        # each retry it schedules: ours is the one that is passed along.
        if attempt is None:
            attempt = CappedBackoff(timeout=self.reconnect_timeout)
        super()._add_connection(attempt, growing=growing)
