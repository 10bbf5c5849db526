"""Throughput of POST /api/v1/tool-decisions against a bare baseline, over real HTTP.

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/tool_decisions.py                      # SQLite, then PostgreSQL
    .venv/bin/python benchmarks/tool_decisions.py --db sqlite --seconds 5
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/tool_decisions.py

For each database it builds throwaway state (a fresh SQLite file in a temporary folder, or
a PostgreSQL database named `aimon_bench`, created and dropped here, never anyone else's):
one runtime, its token, 300 local tools of mixed axes and an MCP server with 100 more.
Then it starts uvicorn on 127.0.0.1 with benchmarks.settings (one worker by default: the
ratio, not the absolute figure, is the point, and the load generator needs a core too),
and drives both endpoints from a second process with `wrk` (or, without wrk, a small
threaded http.client loop) over keep-alive connections:

* `/bench/baseline`: the same token lookup on the Bearer header, a small JsonResponse;
* `/api/v1/tool-decisions`: the real endpoint, cycling through the registered tools.

Rounds alternate baseline / decisions so drift hits both alike; the median of each is
reported with their ratio. The target is a ratio of at least 0.80. On a shared machine
the wall-clock figures move with everyone else's load, so each round also reads the CPU
time the server's processes spent (from /proc) and reports requests per server CPU
second: the cost of each endpoint whatever else the machine is doing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.client import HTTPConnection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BENCH_DB = "aimon_bench"
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/postgres"
LOCAL_TOOLS = 300
MCP_TOOLS = 100
TARGET_RATIO = 0.80


# --- Throwaway state (runs in a child process with the benchmark's environment) -------------------


def seed() -> None:
    """Create the runtime, its token and the tools; print the token and the tool names as JSON."""
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from aimon_admin.core.actors import Actor
    from aimon_admin.registry.services import local_tools_replace, mcp_server_create, mcp_tools_record
    from aimon_admin.runtimes.services import runtime_create, token_issue

    actor = Actor.system("benchmark")
    runtime = runtime_create(name="bench", actor=actor, exempt_at_or_below="MUTATING")
    _, token = token_issue(runtime=runtime, actor=actor, label="benchmark")
    levels = ["READ_ONLY", "MUTATING", "MUTATING"]
    tools = [
        {
            "name": f"tool_{i:03d}",
            "description": f"Benchmark tool {i}",
            "input_schema": {"type": "object", "properties": {"arg": {"type": "string"}}},
            "side_effect_level": levels[i % 3],
            "destructive_behavior": "DESTRUCTIVE" if i % 2 else "NON_DESTRUCTIVE",
            "idempotency_behavior": "IDEMPOTENT" if i % 5 == 0 else "NON_IDEMPOTENT",
        }
        for i in range(LOCAL_TOOLS)
    ]
    local_tools_replace(runtime=runtime, tools=tools, actor=actor)
    server = mcp_server_create(name="bench-mcp", transport="STDIO", command="true", actor=actor)
    listing = [
        {"name": f"mcp_{i:03d}", "annotations": {"readOnlyHint": i % 2 == 0}} for i in range(MCP_TOOLS)
    ]
    mcp_tools_record(server=server, listing=listing, actor=actor, complete=True)
    print(json.dumps({"token": token, "tools": [t["name"] for t in tools]}))


# --- Databases -------------------------------------------------------------------------------------


def pg_admin(base_url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(base_url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        conn.execute(sql)


def pg_url_for(base_url: str, name: str) -> str:
    parts = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


# --- Load ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def bodies(tools: list[str]) -> list[str]:
    # Attended and unattended, every tool in turn: every decision reason the gate has.
    return [
        json.dumps({"tool": name, "server": None, "session_id": "s-1" if i % 2 else None})
        for i, name in enumerate(tools)
    ]


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


def server_cpu_seconds(session: int) -> float:
    """User + system CPU time of every live process in the server's session (Linux /proc)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # field 6 of stat, after pid and (comm)
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def run_wrk(port: int, path: str, token: str, payloads: list[str], seconds: int, connections: int) -> int:
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
    return int(re.search(r"(\d+) requests in", out).group(1))


def run_python(port: int, path: str, token: str, payloads: list[str], seconds: int, connections: int) -> int:
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
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts)


def one_round(run, port: int, path: str, token: str, payloads: list[str], args, session: int):  # type: ignore[no-untyped-def]
    """(requests/s, requests per server CPU second) of one bounded round."""
    cpu, started = server_cpu_seconds(session), time.monotonic()
    requests = run(port, path, token, payloads, args.seconds, args.connections)
    elapsed, used = time.monotonic() - started, server_cpu_seconds(session) - cpu
    return requests / elapsed, requests / used if used else float("nan")


def measure(label: str, database_url: str, args: argparse.Namespace) -> tuple[float, float]:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="benchmarks.settings",
        DATABASE_URL=database_url,
        DATABASE_CONN_MAX_AGE=str(args.conn_max_age),
        PYTHONPATH=str(ROOT),
    )
    env.pop("REDIS_URL", None)
    subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    seeded = json.loads(
        subprocess.run(
            [PYTHON, __file__, "--seed"], cwd=ROOT, env=env, check=True, capture_output=True, text=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    token = seeded["token"]
    decision_bodies = bodies(seeded["tools"])
    port = free_port()
    server = subprocess.Popen(
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
    run = run_wrk if shutil.which("wrk") and not args.python_client else run_python
    try:
        wait_until_up(port, token)
        for path, payloads in (("/bench/baseline", ["{}"]), ("/api/v1/tool-decisions", decision_bodies)):
            run(port, path, token, payloads, 2, args.connections)  # warm-up
        base, real = [], []
        for _ in range(args.rounds):
            base.append(one_round(run, port, "/bench/baseline", token, decision_bodies, args, server.pid))
            real.append(
                one_round(run, port, "/api/v1/tool-decisions", token, decision_bodies, args, server.pid)
            )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    b, r = statistics.median(x[0] for x in base), statistics.median(x[0] for x in real)
    bc, rc = statistics.median(x[1] for x in base), statistics.median(x[1] for x in real)
    client = "wrk" if run is run_wrk else "python threads"
    print(
        f"{label}: baseline {b:,.0f} req/s, tool-decisions {r:,.0f} req/s, ratio {r / b:.2f}; "
        f"per server CPU second {bc:,.0f} vs {rc:,.0f}, ratio {rc / bc:.2f} (target {TARGET_RATIO:.2f})\n"
        f"    median of {args.rounds} x {args.seconds}s rounds, {client}, {args.connections} connections, "
        f"{args.workers} uvicorn worker(s), CONN_MAX_AGE={args.conn_max_age}"
    )
    print(f"    baseline rounds req/s: {', '.join(f'{x[0]:,.0f}' for x in base)}")
    print(f"    decision rounds req/s: {', '.join(f'{x[0]:,.0f}' for x in real)}")
    return b, r


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seconds", type=int, default=10, help="length of each measured round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    # 0, as the product ships: under ASGI every request runs in a thread of its own, so a
    # kept connection would never be reused, only left open.
    parser.add_argument("--conn-max-age", type=int, default=0, help="DATABASE_CONN_MAX_AGE for the server")
    parser.add_argument("--python-client", action="store_true", help="use threads even if wrk is installed")
    parser.add_argument("--seed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seed:
        seed()
        return 0

    ratios = []
    if args.db in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="aimon_bench_") as folder:
            b, r = measure("SQLite", f"sqlite:///{folder}/bench.sqlite3", args)
            ratios.append(r / b)
    if args.db in ("postgres", "both"):
        base_url = os.environ.get("DATABASE_URL") or DEFAULT_PG
        if not base_url.startswith(("postgres://", "postgresql://")):
            base_url = DEFAULT_PG
        pg_admin(base_url, f"DROP DATABASE IF EXISTS {BENCH_DB}")
        pg_admin(base_url, f"CREATE DATABASE {BENCH_DB}")
        try:
            b, r = measure("PostgreSQL", pg_url_for(base_url, BENCH_DB), args)
            ratios.append(r / b)
        finally:
            pg_admin(base_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    return 0 if all(ratio >= TARGET_RATIO for ratio in ratios) else 1


if __name__ == "__main__":
    sys.exit(main())
