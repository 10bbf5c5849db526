"""The check a pooled PostgreSQL connection passes before a request borrows it.

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
"""

from __future__ import annotations

import select
import threading
import time
import weakref

import psycopg
from psycopg_pool import ConnectionPool

FULL_CHECK_SECONDS = 10.0

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
