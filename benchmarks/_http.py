"""The plumbing the HTTP throughput benchmarks share (tool_decisions.py, skill_decisions.py).

Throwaway PostgreSQL databases, the server (uvicorn with benchmarks.settings, in a
session of its own), the load (`wrk` over keep-alive connections, or threads with
http.client without it), and alternating bounded rounds, each reading the CPU time the
server spent: its own processes (from /proc) and, on PostgreSQL, the backends serving it.
On a shared machine the wall-clock figures move with everyone else's load; requests per
server CPU second is the cost of each endpoint whatever else the machine is doing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.client import HTTPConnection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/postgres"

Run = Callable[[int, str, str, list[str], int, int], tuple[int, float]]


# --- Databases -------------------------------------------------------------------------------------


def pg_admin(base_url: str, sql: str, params: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(base_url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        cursor = conn.execute(sql, params or None)
        return cursor.fetchall() if cursor.description else []


def pg_url_for(base_url: str, name: str) -> str:
    parts = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def pg_base_url() -> str:
    """DATABASE_URL if it names PostgreSQL (only its server is used), else the local default."""
    base_url = os.environ.get("DATABASE_URL") or DEFAULT_PG
    return base_url if base_url.startswith(("postgres://", "postgresql://")) else DEFAULT_PG


@contextmanager
def throwaway_pg(name: str) -> Iterator[str]:
    """A fresh PostgreSQL database of this name (the benchmark's own, never anyone else's),
    dropped afterwards; yields its URL."""
    base_url = pg_base_url()
    pg_admin(base_url, f"DROP DATABASE IF EXISTS {name}")
    pg_admin(base_url, f"CREATE DATABASE {name}")
    try:
        yield pg_url_for(base_url, name)
    finally:
        pg_admin(base_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def server_env(database_url: str, args: argparse.Namespace) -> dict[str, str]:
    """The server's environment (benchmarks.settings, no Redis), its database migrated."""
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="benchmarks.settings",
        DATABASE_URL=database_url,
        DATABASE_CONN_MAX_AGE=str(args.conn_max_age),
        PYTHONPATH=str(ROOT),
    )
    env.pop("REDIS_URL", None)
    subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    return env


def child_json(script: str, flag: str, env: dict[str, str]) -> dict:
    """Run `script flag` in the benchmark's environment; its last line of output, as JSON."""
    out = subprocess.run(
        [PYTHON, script, flag], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def add_common_arguments(parser: argparse.ArgumentParser, *, db: str) -> None:
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default=db)
    parser.add_argument("--seconds", type=int, default=10, help="length of each measured round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    # 0, as the product runs under ASGI: each request's sync code runs in a thread of its
    # own, so a kept connection is never reused, only left open (on a shared PostgreSQL,
    # until "too many clients").
    parser.add_argument("--conn-max-age", type=int, default=0, help="DATABASE_CONN_MAX_AGE for the server")
    parser.add_argument("--python-client", action="store_true", help="use threads even if wrk is installed")


# --- The server ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def wait_until_up(port: int, token: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("POST", "/bench/baseline", body="{}", headers=headers(token))
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("uvicorn did not come up")


@dataclass
class Server:
    port: int
    session: int  # the process session of uvicorn and its workers
    database: str | None  # the PostgreSQL database it uses, whose backends count as its CPU


@contextmanager
def uvicorn(
    env: dict[str, str], token: str, args: argparse.Namespace, *, database_cpu: bool = True
) -> Iterator[Server]:
    """uvicorn on 127.0.0.1 with these settings, up (the baseline answers) until the block
    ends. `database_cpu`: count the PostgreSQL backends serving it as its CPU too."""
    port = free_port()
    process = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "uvicorn",
            "aimon_admin.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(args.workers),
            "--lifespan",
            "off",
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    url = env["DATABASE_URL"]
    on_pg = database_cpu and url.startswith("postgres")
    database = urllib.parse.urlsplit(url).path.lstrip("/") if on_pg else None
    try:
        wait_until_up(port, token)
        yield Server(port=port, session=process.pid, database=database)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def _cpu_ticks(stat: Path) -> tuple[int, int] | None:
    """(session, user + system ticks) of one /proc/<pid>/stat, None if it is gone."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[3]), int(fields[11]) + int(fields[12])  # fields 6, 14 and 15 of stat


def server_cpu_seconds(server: Server) -> float:
    """User + system CPU time of the server's live processes (Linux /proc), and of the
    PostgreSQL backends connected to its database (its pool's connections live as long as
    the server, so the difference over a round is the round's)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        found = _cpu_ticks(stat)
        if found is not None and found[0] == server.session:
            total += found[1]
    if server.database:
        rows = pg_admin(
            pg_base_url(), "SELECT pid FROM pg_stat_activity WHERE datname = %s", (server.database,)
        )
        for (pid,) in rows:
            found = _cpu_ticks(Path(f"/proc/{pid}/stat"))
            if found is not None:
                total += found[1]
    return total / os.sysconf("SC_CLK_TCK")


# --- The load --------------------------------------------------------------------------------------


WRK_SCRIPT = """
local bodies = {%s}
local i = 0
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer %s"
wrk.headers["Content-Type"] = "application/json"
request = function()
  i = (i %% #bodies) + 1
  return wrk.format(nil, nil, nil, bodies[i])
end
local bad = 0
response = function(status, headers, body)
  if status ~= 200 then bad = bad + 1 end
end
done = function(summary, latency, requests)
  io.write(string.format("non200=%%d\\n", bad))
end
"""


def run_wrk(
    port: int, path: str, token: str, payloads: list[str], seconds: int, connections: int
) -> tuple[int, float]:
    """(requests, seconds) of one wrk run cycling through the bodies; every answer must be 200."""
    lua = WRK_SCRIPT % (", ".join(json.dumps(p) for p in payloads), token)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua)
    try:
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{seconds}s",
                "-s",
                script.name,
                f"http://127.0.0.1:{port}{path}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.unlink(script.name)
    # The response() hook runs per thread; with -t1 there is one counter.
    bad = re.search(r"non200=(\d+)", out)
    if bad and int(bad.group(1)):
        raise SystemExit(f"{path}: {bad.group(1)} responses were not 200\n{out}")
    found = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m)\b", out)
    if found is None:
        raise SystemExit(f"unexpected wrk output:\n{out}")
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0}[found.group(3)]
    return int(found.group(1)), float(found.group(2)) * scale


def run_python(
    port: int, path: str, token: str, payloads: list[str], seconds: int, connections: int
) -> tuple[int, float]:
    """Without wrk: one keep-alive connection per thread, a bounded loop of `seconds`."""
    counts = [0] * connections
    deadline = time.monotonic() + seconds

    def worker(slot: int) -> None:
        conn = HTTPConnection("127.0.0.1", port, timeout=10)
        i = slot
        while time.monotonic() < deadline:
            conn.request("POST", path, body=payloads[i % len(payloads)], headers=headers(token))
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise SystemExit(f"{path}: HTTP {response.status}")
            counts[slot] += 1
            i += connections
        conn.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(connections)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts), time.monotonic() - started


def load_runner(args: argparse.Namespace) -> tuple[Run, str]:
    import shutil

    if shutil.which("wrk") and not args.python_client:
        return run_wrk, "wrk"
    return run_python, "python threads"


@dataclass(frozen=True)
class Round:
    rate: float  # requests per second
    per_cpu: float  # requests per server CPU second


def one_round(
    run: Run, server: Server, path: str, token: str, payloads: list[str], args: argparse.Namespace
) -> Round:
    """One bounded round of load on one path."""
    cpu = server_cpu_seconds(server)
    requests, elapsed = run(server.port, path, token, payloads, args.seconds, args.connections)
    used = server_cpu_seconds(server) - cpu
    return Round(requests / elapsed, requests / used if used else float("nan"))


def alternate(
    run: Run, server: Server, paths: list[str], token: str, payloads: list[str], args: argparse.Namespace
) -> dict[str, list[Round]]:
    """After a short warm-up of each, `args.rounds` rounds of each path in turn, so drift
    in the machine's load hits them alike."""
    for path in paths:
        run(server.port, path, token, payloads, 2, args.connections)
    rounds: dict[str, list[Round]] = {path: [] for path in paths}
    for _ in range(args.rounds):
        for path in paths:
            rounds[path].append(one_round(run, server, path, token, payloads, args))
    return rounds


def paired_ratio(real: list[Round], base: list[Round], attribute: str = "rate") -> float:
    """The median over rounds of each round's ratio to the baseline round just before it:
    what drifts between rounds (everyone else's load) cancels within a pair."""
    import statistics

    return statistics.median(
        getattr(r, attribute) / getattr(b, attribute) for r, b in zip(real, base, strict=True)
    )
