"""A Celery worker is killed in the middle of an MCP sync (T10-T12, T15, A1-A3).

A real worker on the private Redis broker runs a sync against a stdio MCP server that
hangs in ``tools/list``; the worker is SIGKILLed there (its whole process group: nothing
gets to clean up or acknowledge). The task is acknowledged late, so its message goes back
to the queue once the broker's visibility timeout has passed, and a new worker claims the
RUNNING run again and finishes it. Until then the stored tools are exactly what the last
completed sync left; afterwards, exactly the new listing; never a mix.

With the broker's default visibility timeout (ten minutes) the run would sit at RUNNING
that long: the worker's lease on the run lapses instead, within seconds,
and *Sync now* fails the dead worker's run (audited) and starts a new one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aimon_admin.core.plurals import counted
from aimon_admin.registry.services import SYNC_ALREADY_ACTIVE
from aimon_admin.registry.sync.messages import ERROR_STALE, PROGRESS_DONE
from aimon_admin.registry.sync.runs import LEASE, LEASE_CHECK_SECONDS, LEASE_RENEW_SECONDS
from tests.faults.checks import assert_chain_whole
from tests.faults.conftest import ROOT, Process, Product, wait_until
from tests.registry.mcp_servers.catalog import VARIANTS

pytestmark = pytest.mark.postgres

# Short, so the killed worker's message is handed out again within the test.
VISIBILITY_TIMEOUT_SECONDS = 2
SYNC_WITHIN_SECONDS = 40.0  # a worker's boot (several seconds on a busy machine) included
# A run whose worker is gone is found within a minute (by *Sync now* here;
# beat's sweep, every LEASE_CHECK_SECONDS, would find it by then as well).
DEAD_WORKER_FOUND_WITHIN_SECONDS = 60.0
assert LEASE.total_seconds() + LEASE_CHECK_SECONDS <= DEAD_WORKER_FOUND_WITHIN_SECONDS


def run_row(product: Product, run_id: int) -> dict[str, Any]:
    with product.postgres.connect() as db:
        cursor = db.execute(
            "SELECT status, attempts, error, progress, tools_seen, tools_added, tools_changed, "
            "tools_absent, finished_at IS NOT NULL AS finished FROM registry_mcpsyncrun WHERE id = %s",
            [run_id],
        )
        names = [column.name for column in cursor.description]
        return dict(zip(names, cursor.fetchone(), strict=True))


def tool_rows(product: Product, server_id: int) -> list[tuple[Any, ...]]:
    """Every stored column of every tool of the server."""
    with product.postgres.connect() as db:
        return db.execute(
            "SELECT * FROM registry_tool WHERE server_id = %s ORDER BY name", [server_id]
        ).fetchall()


def tool_names(product: Product, server_id: int) -> list[str]:
    with product.postgres.connect() as db:
        rows = db.execute("SELECT name FROM registry_tool WHERE server_id = %s ORDER BY name", [server_id])
        return [name for (name,) in rows.fetchall()]


def sync_events(product: Product, run_id: int) -> list[tuple[str, Any]]:
    with product.postgres.connect() as db:
        return db.execute(
            "SELECT action, details->'attempt' FROM audit_auditevent "
            "WHERE subject_type = 'mcp_server' AND details->>'run_id' = %s ORDER BY seq",
            [str(run_id)],
        ).fetchall()


def wait_for_outcome(product: Product, run_id: int, worker: Process) -> dict[str, Any]:
    def finished() -> bool:
        assert worker.alive(), f"the worker exited:\n{worker.output()}"
        return run_row(product, run_id)["status"] in ("SUCCEEDED", "FAILED")

    wait_until(finished, SYNC_WITHIN_SECONDS, f"sync run {run_id} to finish", interval=0.1)
    return run_row(product, run_id)


@dataclass
class SlowServer:
    """The slow stdio MCP server as registered, after one completed sync of listing v1."""

    name: str
    id: int
    variant: Path
    marker: Path
    synced_rows: list[tuple[Any, ...]]


V1_NAMES = sorted(tool["name"] for tool in VARIANTS["v1"])
V2_NAMES = sorted(tool["name"] for tool in VARIANTS["v2"])


def synced_server(
    product: Product, worker: Process, folder: Path, tag: str
) -> tuple[dict[str, Any], SlowServer]:
    """People, the slow server, and its first sync (listing v1) completed by `worker`."""
    name = f"slow-catalog-{tag}"
    variant, marker = folder / f"{name}.variant", folder / f"{name}.listings"
    variant.write_text("v1")
    who = product.run(
        "people_and_server",
        tag=tag,
        name=name,
        args=["-m", "tests.faults.slow_mcp", "--variant-file", str(variant), "--marker-file", str(marker)],
        env={"PYTHONPATH": str(ROOT)},
    )
    # A completed sync first: the state a failed one must leave exactly as it was.
    assert wait_for_outcome(product, who["run_id"], worker)["status"] == "SUCCEEDED"
    assert tool_names(product, who["server_id"]) == V1_NAMES
    return who, SlowServer(name, who["server_id"], variant, marker, tool_rows(product, who["server_id"]))


def start_slow_sync(product: Product, who: dict[str, Any], server: SlowServer) -> tuple[int, int]:
    """Queue a sync that hangs inside tools/list; return its run and the MCP server's pid."""
    server.variant.write_text("slow")
    run_id = product.run("sync", name=server.name, operator=who["operator"])["run_id"]
    wait_until(
        lambda: server.marker.exists() and "slow" in server.marker.read_text(),
        SYNC_WITHIN_SECONDS,
        "the slow listing",
    )
    return run_id, int(server.marker.read_text().splitlines()[-1].split()[0])


def assert_half_way_untouched(product: Product, server: SlowServer, run_id: int) -> None:
    """The run is RUNNING under its first attempt; the tools are as the last sync left them."""
    assert run_row(product, run_id) | {"progress": None} == {
        "status": "RUNNING",
        "attempts": 1,
        "error": "",
        "progress": None,
        "tools_seen": 0,
        "tools_added": 0,
        "tools_changed": 0,
        "tools_absent": 0,
        "finished": False,
    }
    assert tool_rows(product, server.id) == server.synced_rows
    assert sync_events(product, run_id) == [("MCP_SYNC_REQUESTED", None)]


def assert_completed_by_the_retry(
    product: Product, server: SlowServer, outcome: dict[str, Any], run_id: int
) -> None:
    """The second attempt stored listing v2 whole, with one event naming that attempt."""
    added, absent = sorted(set(V2_NAMES) - set(V1_NAMES)), sorted(set(V1_NAMES) - set(V2_NAMES))
    changed = 3  # catalog v2: one claims less risk, one more, one rewords its description
    assert outcome == {
        "status": "SUCCEEDED",
        "attempts": 2,
        "error": "",
        "progress": counted(
            PROGRESS_DONE,
            len(V2_NAMES),
            added=len(added),
            changed=changed,
            absent=len(absent),
        ),
        "tools_seen": len(V2_NAMES),
        "tools_added": len(added),
        "tools_changed": changed,
        "tools_absent": len(absent),
        "finished": True,
    }
    # The absent tool is kept (marked absent), not deleted; the new one is there.
    assert tool_names(product, server.id) == sorted({*V1_NAMES, *V2_NAMES})
    assert sync_events(product, run_id) == [("MCP_SYNC_REQUESTED", None), ("MCP_SYNC_SUCCEEDED", 2)]
    assert [line.split()[1] for line in server.marker.read_text().splitlines()] == ["v1", "slow", "v2"]
    with product.postgres.connect() as db:
        active = db.execute(
            "SELECT count(*) FROM registry_mcpsyncrun"
            " WHERE server_id = %s AND status IN ('QUEUED', 'RUNNING')",
            [server.id],
        ).fetchone()[0]
    assert active == 0
    assert_chain_whole(product)


def test_a_worker_killed_mid_sync_is_retried_by_a_new_worker_and_leaves_no_half_state(
    product: Product, start_worker: Callable[..., Process], tmp_path: Path
) -> None:
    env = {"CELERY_BROKER_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT_SECONDS)}
    first_worker = start_worker(**env)
    who, server = synced_server(product, first_worker, tmp_path, "celery")

    # The whole worker dies (its process group: nothing acknowledges or cleans up).
    run_id, mcp_pid = start_slow_sync(product, who, server)
    taken_at = time.monotonic()
    first_worker.kill()
    with contextlib.suppress(ProcessLookupError):  # the MCP server, if it is not in the group
        os.kill(mcp_pid, signal.SIGKILL)
    assert_half_way_untouched(product, server, run_id)

    # A new worker, once the message is visible again, retries the run and completes it.
    server.variant.write_text("v2")
    time.sleep(max(0.0, taken_at + VISIBILITY_TIMEOUT_SECONDS + 0.5 - time.monotonic()))
    second_worker = start_worker(**env)
    assert_completed_by_the_retry(product, server, wait_for_outcome(product, run_id, second_worker), run_id)


def test_a_pool_process_killed_mid_sync_is_requeued_at_once_and_the_retry_completes(
    product: Product, start_worker: Callable[..., Process], tmp_path: Path
) -> None:
    # The default visibility timeout: the retry must come from the worker's own requeue
    # (acks_late + reject_on_worker_lost), not from the broker handing the message out again.
    worker = start_worker()
    who, server = synced_server(product, worker, tmp_path, "pool")

    # Only the pool process running the task dies (as the OOM killer would pick it).
    run_id, mcp_pid = start_slow_sync(product, who, server)
    pool_pid = int(Path(f"/proc/{mcp_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert pool_pid != worker.popen.pid
    server.variant.write_text("v2")
    os.kill(pool_pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(mcp_pid, signal.SIGKILL)

    assert_completed_by_the_retry(product, server, wait_for_outcome(product, run_id, worker), run_id)


def lease_of(product: Product, run_id: int) -> Any:
    with product.postgres.connect() as db:
        return db.execute(
            "SELECT lease_expires_at FROM registry_mcpsyncrun WHERE id = %s", [run_id]
        ).fetchone()[0]


def test_a_killed_worker_group_is_found_by_its_lapsed_lease_and_sync_now_works_again(
    product: Product, start_worker: Callable[..., Process], tmp_path: Path
) -> None:
    # The broker's default visibility timeout (ten minutes), so nothing is
    # handed out again within this test: only the lease can free the server.
    first_worker = start_worker()
    who, server = synced_server(product, first_worker, tmp_path, "lease")
    run_id, mcp_pid = start_slow_sync(product, who, server)

    # While the sync hangs, its worker renews the lease.
    taken = lease_of(product, run_id)
    wait_until(
        lambda: lease_of(product, run_id) > taken, LEASE_RENEW_SECONDS + 5, "the worker to renew its lease"
    )

    first_worker.kill()  # the whole group: nothing acknowledges, nothing cleans up
    killed_at = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.kill(mcp_pid, signal.SIGKILL)
    assert_half_way_untouched(product, server, run_id)
    # A new worker boots meanwhile: the killed one's message stays out for ten minutes, so
    # the only work it can get is what *Sync now* queues.
    server.variant.write_text("v2")
    second_worker = start_worker()

    # The lease has not lapsed yet: *Sync now* still says a sync is running.
    assert product.run("sync_or_refusal", name=server.name, operator=who["operator"]) == {
        "refused": SYNC_ALREADY_ACTIVE
    }

    # Within a minute of the kill, *Sync now* finds the run's worker gone and starts a new run.
    accepted: dict[str, Any] = {}

    def sync_now() -> bool:
        # Nothing of the dead run stored, checked up to the last moment before a new run can
        # exist: once *Sync now* is accepted, the second worker may store v2 straight away.
        assert tool_rows(product, server.id) == server.synced_rows
        accepted.update(product.run("sync_or_refusal", name=server.name, operator=who["operator"]))
        return "run_id" in accepted

    wait_until(sync_now, DEAD_WORKER_FOUND_WITHIN_SECONDS, "Sync now to work again", interval=1.0)
    assert time.monotonic() - killed_at <= DEAD_WORKER_FOUND_WITHIN_SECONDS

    # The dead worker's run failed with a clear message and its audit event.
    assert run_row(product, run_id) | {"progress": None} == {
        "status": "FAILED",
        "attempts": 1,
        "error": ERROR_STALE,
        "progress": None,
        "tools_seen": 0,
        "tools_added": 0,
        "tools_changed": 0,
        "tools_absent": 0,
        "finished": True,
    }
    assert sync_events(product, run_id) == [("MCP_SYNC_REQUESTED", None), ("MCP_SYNC_FAILED", 1)]

    # The new run is an ordinary sync: the new worker completes it.
    outcome = wait_for_outcome(product, accepted["run_id"], second_worker)
    assert (outcome["status"], outcome["attempts"]) == ("SUCCEEDED", 1)
    assert tool_names(product, server.id) == sorted({*V1_NAMES, *V2_NAMES})
    assert_chain_whole(product)
