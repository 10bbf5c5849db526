"""The pooled connection check (aimon_admin/core/dbpool.py), against the real PostgreSQL:
no round trip for a connection that is fine, and a connection the server closed never
reaches a request (issue 6: PostgreSQL down and back, nothing answered from a dead
connection)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection
from psycopg_pool import ConnectionPool

from aimon_admin.core import dbpool

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def conninfo(db: None) -> dict[str, Any]:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return params


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[psycopg.Connection]:
    """Every empty-query check psycopg-pool's own check makes (the outside library, counted)."""
    made: list[psycopg.Connection] = []
    real = ConnectionPool.check_connection

    def counting(conn: psycopg.Connection) -> None:
        made.append(conn)
        real(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counting))
    return made


def _terminate(conninfo: dict[str, Any], pids: list[int]) -> None:
    with psycopg.connect(**conninfo, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])


@pytest.fixture
def pool(conninfo: dict[str, Any]) -> Iterator[ConnectionPool]:
    with ConnectionPool(
        kwargs={**conninfo, "autocommit": True},
        min_size=2,
        max_size=2,
        check=dbpool.check_connection,
        timeout=5,
    ) as opened:
        opened.wait()
        yield opened


def test_a_fine_connection_is_lent_without_a_round_trip(
    pool: ConnectionPool, round_trips: list[psycopg.Connection]
) -> None:
    with pool.connection() as first:
        first.execute("SELECT 1")
    checks_after_first = len(round_trips)
    assert checks_after_first <= 1  # the first borrow of a connection is checked in full
    for _ in range(20):
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    # Two connections, each checked in full once at most; the other borrows asked the socket.
    assert len(round_trips) <= 2


def test_a_connection_the_server_closed_is_replaced_not_lent(
    pool: ConnectionPool, conninfo: dict[str, Any], round_trips: list[psycopg.Connection]
) -> None:
    # Issue 6: PostgreSQL restarted under the pool; a request must get a live connection.
    pids = []
    for _ in range(2):
        with pool.connection() as conn:
            pids.append(conn.info.backend_pid)
    # Both pooled connections checked in full once: from now on only the socket is asked.
    with pool.connection(), pool.connection():
        pass
    _terminate(conninfo, sorted(set(pids)))
    for _ in range(4):
        with pool.connection() as conn:
            assert conn.info.backend_pid not in pids
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_without_the_check_the_dead_connection_would_be_lent(conninfo: dict[str, Any]) -> None:
    # The control: the test above can fail. No check, and the terminated backend's
    # connection comes out of the pool and fails its first query.
    with ConnectionPool(
        kwargs={**conninfo, "autocommit": True}, min_size=1, max_size=1, timeout=5
    ) as unchecked:
        with unchecked.connection() as conn:
            pid = conn.info.backend_pid
        _terminate(conninfo, [pid])
        with pytest.raises(psycopg.OperationalError), unchecked.connection() as conn:
            conn.execute("SELECT 1")


def test_a_connection_unchecked_for_long_gets_a_round_trip(
    pool: ConnectionPool, round_trips: list[psycopg.Connection], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A peer gone without a word sends nothing: a full check still comes, now and then.
    with pool.connection():
        pass
    monkeypatch.setattr(dbpool, "FULL_CHECK_SECONDS", 0.0)
    before = len(round_trips)
    for _ in range(3):
        with pool.connection():
            pass
    assert len(round_trips) - before == 3


def test_a_closed_connection_is_refused_at_once(conninfo: dict[str, Any]) -> None:
    conn = psycopg.connect(**conninfo, autocommit=True)
    conn.close()
    with pytest.raises(psycopg.OperationalError):
        dbpool.check_connection(conn)


def test_the_product_pool_uses_this_check() -> None:
    # Settings: the product's backend builds the pool with this check.
    pool = connection.pool
    assert pool is not None
    assert pool._check is dbpool.check_connection  # psycopg-pool keeps the callback here
