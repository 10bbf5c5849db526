"""After a long PostgreSQL outage a web node serves again within seconds.

psycopg-pool retries a lost connection with an exponential back-off (1, 2, 4, 8, 16 s …):
after 330 s down, one worker's next attempt was 26 s after PostgreSQL returned. The
product's pool caps that delay (aimon_admin/core/dbpool.py), so however long the outage,
the node is back within RECOVER_WITHIN_SECONDS of the database.

The outage here is shorter than the one in the field, but long enough for the uncapped
back-off to reach a 16 s step (attempts at 0, 1, 3, 7, 15 s, the next at 31 s): the
database really stops, the node's readiness really names it down meanwhile, and it really
comes back.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.faults.clients import Recorder, Runtime, database_ready
from tests.faults.conftest import Node, PrivatePostgres, Product, wait_until

pytestmark = pytest.mark.postgres

OUTAGE_SECONDS = 18.0
RECOVER_WITHIN_SECONDS = 5.0


def test_a_node_serves_again_within_seconds_of_the_database_after_a_long_outage(
    product: Product, private_postgres: PrivatePostgres, start_node: Callable[..., Node]
) -> None:
    node = start_node()
    who = product.run("people", tag="long")
    node.wait_ready()
    seen = Recorder()
    runtime = Runtime(node.url, who["token"], seen)

    def healthy() -> bool:
        return database_ready(node.url)

    assert healthy()  # the pool holds live connections

    private_postgres.stop()
    down_at = time.monotonic()
    # A balancer's readiness checks through the outage: each one says the database is down.
    while time.monotonic() - down_at < OUTAGE_SECONDS:
        assert not healthy()
        time.sleep(0.5)

    private_postgres.start()
    recovered_in = wait_until(healthy, 60, "the node to reach the database again", interval=0.2)
    assert recovered_in <= RECOVER_WITHIN_SECONDS, f"served again {recovered_in:.1f} s after the database"
    assert runtime.skill_decisions(["deploy"], "s-1") == [("deploy", "ASK", "DEFAULT")]
    assert seen.server_errors() == []  # once it is back, no call of the runtime's fails
