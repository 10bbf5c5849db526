"""The pool's reconnect back-off has a cap (aimon_admin/core/dbpool.py).

The end-to-end proof, a real outage and a real return, is
tests/faults/test_postgres_long_outage.py; these pin the pieces it rests on.
"""

from __future__ import annotations

import inspect
import itertools
import time

import pytest
from django.db import connection
from psycopg_pool import ConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from aimon_admin.core import dbpool
from tests.ports import free_port


def test_the_delay_between_reconnect_attempts_never_passes_the_cap() -> None:
    capped = dbpool.CappedBackoff(timeout=3600)
    uncapped = AttemptWithBackoff(timeout=3600)
    now = 0.0
    for _ in range(30):
        capped.update_delay(now)
        uncapped.update_delay(now)
        assert 0 < capped.delay <= dbpool.RECONNECT_MAX_DELAY_SECONDS
        now += capped.delay
    assert uncapped.delay > 60  # the control: psycopg-pool's own back-off grows without it


def test_the_delay_still_stops_at_the_give_up_time() -> None:
    capped = dbpool.CappedBackoff(timeout=0.5)
    capped.update_delay(0.0)
    assert capped.delay <= 0.5
    assert capped.time_to_give_up(0.6)


def test_the_pool_method_the_subclass_relies_on_is_there() -> None:
    # The subclass passes its attempt to psycopg-pool's _add_connection: if a release
    # renamed it, the cap would silently stop applying.
    parameters = inspect.signature(ConnectionPool._add_connection).parameters
    assert list(parameters) == ["self", "attempt", "growing"]
    assert "AttemptWithBackoff(timeout=self.reconnect_timeout)" in inspect.getsource(
        ConnectionPool._add_connection
    )


def test_a_pool_with_no_server_keeps_trying_at_least_once_a_second() -> None:
    # A real pool on a port nobody listens on: connection refused, attempt after attempt.
    port = free_port()
    attempts: list[float] = []
    real_connect = dbpool.ReconnectingPool._connect

    def counted(pool: dbpool.ReconnectingPool, timeout: float | None = None) -> object:
        attempts.append(time.monotonic())
        return real_connect(pool, timeout)

    pool = dbpool.ReconnectingPool(
        conninfo=f"host=127.0.0.1 port={port} user=nobody connect_timeout=1", min_size=1, open=False
    )
    pool._connect = counted.__get__(pool)  # type: ignore[method-assign] # counts, then connects for real
    pool.open(wait=False)
    try:
        time.sleep(5.5)
    finally:
        pool.close(timeout=1)
    # Uncapped: attempts at 0, 1 and 3 s, the next at 7 s. Capped at 1 s: about six.
    assert len(attempts) >= 5
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert max(gaps) <= dbpool.RECONNECT_MAX_DELAY_SECONDS + 0.5


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_product_pool_is_the_reconnecting_pool() -> None:
    assert isinstance(connection.pool, dbpool.ReconnectingPool)
