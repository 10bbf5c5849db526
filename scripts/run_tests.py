"""Run the test suite twice: on the embedded default (SQLite), then on PostgreSQL + Redis.

A missing PostgreSQL, Redis or Chromium skips what needs it with a line that says so;
with AIMON_REQUIRE_SERVICES=1 (as .ci/run sets) any such skip is a failure instead.
Extra arguments go to both pytest runs (e.g. `-k audit`).
"""

from __future__ import annotations

import os
import subprocess
import sys

PG_URL = os.environ.get("AIMON_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("AIMON_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
REQUIRED = os.environ.get("AIMON_REQUIRE_SERVICES") == "1"


def postgres_reachable() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_URL.replace("postgres://", "postgresql://", 1), connect_timeout=3):
            return None
    except Exception as exc:  # any failure means "not here"; we only report it
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def run(label: str, env: dict[str, str], args: list[str]) -> int:
    print(f"\n=== {label} ===", flush=True)
    return subprocess.call([sys.executable, "-m", "pytest", *args], env=env)


def main() -> int:
    args = sys.argv[1:]
    base = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    status = run("tests on the embedded default (SQLite, no Redis)", base, args)
    if status != 0:
        return status

    problem = postgres_reachable()
    if problem is not None:
        line = f"SKIPPED: the PostgreSQL + Redis run: PostgreSQL is not reachable at {PG_URL} ({problem})"
        print(f"\n{line}", flush=True)
        return 1 if REQUIRED else 0
    env = dict(base, DATABASE_URL=PG_URL, REDIS_URL=REDIS_URL, CELERY_TASK_ALWAYS_EAGER="1")
    return run("tests on PostgreSQL + Redis", env, args)


if __name__ == "__main__":
    sys.exit(main())
