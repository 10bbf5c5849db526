"""The product's PostgreSQL pool: the check a connection passes before a request borrows
it, and a reconnect back-off with a cap.

psycopg-pool's own check (`ConnectionPool.check_connection`, what Django passes with
CONN_HEALTH_CHECKS) sends an empty query: one round trip on every borrow, which on a
decision that needs one or two queries of its own is a third of its database waits.

This check asks the socket first, without a round trip. A connection resting in the pool
has no query in flight, so nothing should be waiting to be read on it: when PostgreSQL
closes it (a restart, `pg_terminate_backend`, an idle timeout), the server's goodbye or
the end of the stream makes the socket readable, and only then is the empty query sent —
which fails, so the pool throws the connection away and the request gets a fresh one.
A connection not checked by a round trip for `FULL_CHECK_SECONDS` gets one anyway, for the
failures that send nothing (a peer gone without a word). The same idea as the
non-blocking read Go's MySQL driver makes before reusing a connection.

A connection that breaks between this check and its first query makes that query fail:
the request answers 503 (never ALLOW) and the broken connection leaves the pool.

Reconnecting. psycopg-pool replaces a lost connection in the background, retrying with an
exponential back-off that doubles up to the pool's `reconnect_timeout` (5 min): after a long
outage the next attempt could come half a minute after PostgreSQL was back, and every request
meanwhile answered 503 (issue 13, item 12). `ReconnectingPool` caps the delay between two
attempts at `RECONNECT_MAX_DELAY_SECONDS`, so a node serves again within about a second of the
database's return, whatever the outage's length. While the database is down that costs one
refused connection attempt a second per missing connection: nothing for a server to notice.
psycopg-pool has no option for the cap: the subclass hands its own attempt object to the
pool's `_add_connection` (the one method that creates one; read in psycopg-pool 3.3.3, the
pinned version, and pinned by tests/core/test_dbpool_backoff.py and
tests/faults/test_postgres_long_outage.py).
"""

from __future__ import annotations

import select
import threading
import time
import weakref

import psycopg
from psycopg_pool import ConnectionPool
from psycopg_pool.base import AttemptWithBackoff

FULL_CHECK_SECONDS = 10.0
RECONNECT_MAX_DELAY_SECONDS = 1.0

_last_full_check: weakref.WeakKeyDictionary[psycopg.Connection, float] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _has_input(conn: psycopg.Connection) -> bool:
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def check_connection(conn: psycopg.Connection) -> None:
    """Return quietly if `conn` may be lent; raise if it is broken (the pool discards it)."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the pooled connection is closed")
    now = time.monotonic()
    with _lock:
        last = _last_full_check.get(conn)
    if last is not None and now - last < FULL_CHECK_SECONDS and not _has_input(conn):
        return
    ConnectionPool.check_connection(conn)
    with _lock:
        _last_full_check[conn] = now


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
