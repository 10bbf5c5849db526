"""Run the test suite twice, side by side: on the embedded default (SQLite) and on PostgreSQL + Redis.

Each run is one pytest process, bound to one core for most of its length, so on a machine of
two or more cores the two go at once: the suite takes about as long as its slower run, not as
long as both. The SQLite run's output streams as it goes; the PostgreSQL run's is written to
test-artifacts/postgresql/pytest.log meanwhile and shown, from its start and then as it goes,
once the SQLite run is done. The two never share state: each keeps its own Redis database
(the SQLite run takes the one below AIMON_TEST_REDIS_URL's), pytest cache, screenshots and
block of ports for the servers its tests start (tests/ports.py).

A missing PostgreSQL, Redis or Chromium skips what needs it with a line that says so;
with AIMON_REQUIRE_SERVICES=1 (as .ci/run sets) any such skip is a failure instead.
AIMON_TEST_ONE_AT_A_TIME=1 runs the two one after the other (a one-core machine).
Extra arguments go to both pytest runs (e.g. `-k audit`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
PG_URL = os.environ.get("AIMON_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("AIMON_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
REQUIRED = os.environ.get("AIMON_REQUIRE_SERVICES") == "1"
ONE_AT_A_TIME = os.environ.get("AIMON_TEST_ONE_AT_A_TIME") == "1" or (os.cpu_count() or 1) < 2


def postgres_reachable() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_URL.replace("postgres://", "postgresql://", 1), connect_timeout=3):
            return None
    except Exception as exc:  # any failure means "not here"; we only report it
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def neighbour_database(url: str) -> str:
    """The same Redis server, the database numbered one below (15 → 14; 0 → 1)."""
    parts = urlsplit(url)
    path = parts.path.strip("/")
    number = int(path) if path.isdigit() else 0
    return urlunsplit(parts._replace(path=f"/{number - 1 if number > 0 else number + 1}"))


def pytest_command(name: str, args: list[str]) -> list[str]:
    # Each run its own cache folder: two processes writing one file at once could garble it.
    return [sys.executable, "-m", "pytest", "-o", f"cache_dir=.pytest_cache/{name}", *args]


def follow(log: Path, process: subprocess.Popen[bytes]) -> int:
    """Copy `log` to standard output from its start until `process` ends; its exit status."""
    with log.open("rb") as source:
        while True:
            chunk = source.read(65536)
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                continue
            status = process.poll()
            if status is not None:
                rest = source.read()
                sys.stdout.buffer.write(rest)
                sys.stdout.flush()
                return status
            time.sleep(0.2)


def main() -> int:
    args = sys.argv[1:]
    base = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    sqlite_env = dict(
        base,
        AIMON_TEST_REDIS_URL=REDIS_URL if ONE_AT_A_TIME else neighbour_database(REDIS_URL),
        AIMON_TEST_ARTIFACTS=str(ARTIFACTS / "sqlite"),
        AIMON_TEST_PORT_BASE="20000",
    )
    postgres_env = dict(
        base,
        DATABASE_URL=PG_URL,
        REDIS_URL=REDIS_URL,
        AIMON_TEST_REDIS_URL=REDIS_URL,
        CELERY_TASK_ALWAYS_EAGER="1",
        AIMON_TEST_ARTIFACTS=str(ARTIFACTS / "postgresql"),
        AIMON_TEST_PORT_BASE="22000",
        PYTHONUNBUFFERED="1",  # its log is followed as it grows
    )
    problem = postgres_reachable()
    skipped = f"SKIPPED: the PostgreSQL + Redis run: PostgreSQL is not reachable at {PG_URL} ({problem})"

    postgres: subprocess.Popen[bytes] | None = None
    log = ARTIFACTS / "postgresql" / "pytest.log"
    if problem is None and not ONE_AT_A_TIME:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            command = pytest_command("postgresql", args)
            postgres = subprocess.Popen(command, env=postgres_env, cwd=ROOT, stdout=out, stderr=out)
        print(f"=== tests on PostgreSQL + Redis: started alongside, shown after the SQLite run ({log}) ===")

    print("\n=== tests on the embedded default (SQLite, no Redis) ===", flush=True)
    try:
        sqlite_status = subprocess.call(pytest_command("sqlite", args), env=sqlite_env, cwd=ROOT)
    except BaseException:  # interrupted: the run alongside stops too
        if postgres is not None:
            postgres.terminate()
            postgres.wait()
        raise

    if problem is not None:
        print(f"\n{skipped}", flush=True)
        return sqlite_status or (1 if REQUIRED else 0)
    print("\n=== tests on PostgreSQL + Redis ===", flush=True)
    if postgres is None:
        if sqlite_status != 0:
            return sqlite_status
        return subprocess.call(pytest_command("postgresql", args), env=postgres_env, cwd=ROOT)
    try:
        postgres_status = follow(log, postgres)
    finally:
        if postgres.poll() is None:
            postgres.terminate()
            postgres.wait()
    if sqlite_status != 0:
        print(f"\nThe SQLite run failed (exit status {sqlite_status}): its output is above this run's.")
    return sqlite_status or postgres_status


if __name__ == "__main__":
    sys.exit(main())
