"""The pooled connection check, against the real PostgreSQL: a connection the server closed
never reaches a request (PostgreSQL down and back, nothing answered from a dead connection).
The product's pool (aimon_admin/core/backends/postgresql) checks with psycopg-pool's standard
check, as Django passes it with CONN_HEALTH_CHECKS; a socket-first check bought nothing
measurable in make prod's topology (benchmarks/specials.py) and went."""

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


def _terminate(conninfo: dict[str, Any], pids: list[int]) -> None:
    with psycopg.connect(**conninfo, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])


@pytest.fixture
def pool(conninfo: dict[str, Any]) -> Iterator[ConnectionPool]:
    """A pool built as the product's: its class, its check."""
    product = connection.pool
    assert product is not None
    with dbpool.ReconnectingPool(
        kwargs={**conninfo, "autocommit": True},
        min_size=2,
        max_size=2,
        check=product._check,  # psycopg-pool keeps the callback here
        timeout=5,
    ) as opened:
        opened.wait()
        yield opened


def test_the_product_pool_checks_with_psycopg_pools_standard_check() -> None:
    pool = connection.pool
    assert isinstance(pool, dbpool.ReconnectingPool)
    assert pool._check is ConnectionPool.check_connection


def test_a_connection_the_server_closed_is_replaced_not_lent(
    pool: ConnectionPool, conninfo: dict[str, Any]
) -> None:
    # PostgreSQL restarted under the pool; a request must get a live connection.
    pids = []
    for _ in range(2):
        with pool.connection() as conn:
            pids.append(conn.info.backend_pid)
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
