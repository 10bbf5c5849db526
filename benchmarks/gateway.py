"""The MCP gateway (G2): what it adds to a call, click to forwarded, and 100 sessions at once.

Run by hand (never by CI), from the project root; the default shape needs PostgreSQL, Redis
and nginx:

    .venv/bin/python benchmarks/gateway.py [--calls 500] [--clicks 50] [--sessions 100]
    .venv/bin/python benchmarks/gateway.py --shape embedded      # SQLite, uvicorn in-process
    .venv/bin/python benchmarks/gateway.py --profile gateway.prof --sessions 0

`--shape prod` (the default): make prod's topology, built by scripts/prod.py's own code, in
processes of its own (nginx in front of granian, WSGI, for decisions and opens, and uvicorn
for the long-polls; Redis for wake-ups), on a throwaway PostgreSQL database (`--database`,
created and dropped here) and Redis database `--redis-db`. `--shape embedded`: `make run`'s
shape, a SQLite file and uvicorn in this very process (it then competes with this process's
MCP clients for one interpreter: not a fair measure of the gateway). Behind the gateway, an
MCP server built with the SDK (tests/clients/gateway_servers.py, `counting`) that logs the
moment each call arrives. This process sets the data up and clicks the answers (the answer
service the inbox button calls). Prints figures; asserts nothing.

1. ALLOW overhead: the same read-only call, in turn straight to the server (the MCP SDK's
   client over stdio), through `aimon-gateway` (stdio), and the gateway's own decision alone
   (`Client.tool_decision` with the body the gateway sends, from this process): p50/p99 of
   each and of the difference, so the added time splits into the product's decision and
   the gateway's MCP hop; and the CPU the gateway process and the server spend per call
   (from /proc: steadier than the wall clock on a shared machine).
2. Click to forwarded: a destructive call through the gateway asks; the approver's answer
   (*Allow this call*) is timed to the moment the server logs the call, and the answer
   service's own commit alone (its tasks queued for a worker, as a web request queues them).
   The first `--cold-clicks` asks after the start are shown apart (each server process meets
   its first long-poll, approval use and answer then), as the allowed calls are warmed.
3. 100 MCP sessions at once through one gateway over Streamable HTTP, a quarter each ALLOW
   (read), DENY (an operator's rule), ASK allowed and ASK denied by a person: how many calls
   reached the server without an ALLOW, and how many sessions got no answer.

`--profile FILE` runs the stdio gateway of 1 and 2 under cProfile (timed by its CPU clock) and
writes its profile there.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _http, servers  # noqa: E402

BIN = Path(sys.executable).parent
SERVER = [sys.executable, "-m", "tests.clients.gateway_servers", "--mode", "counting", "--log"]
BENCH_DB = "aimon_bench_gateway"
SESSION = "mcp-bench-decisions"  # the bare decisions' session, not the gateway's


def pct(samples: list[float], p: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def setup(log: Path) -> tuple[str, Any]:
    """Migrate, people, a runtime and its token, the counting server registered and synced."""
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction

    from aimon_admin.accounts.roles import Role
    from aimon_admin.accounts.services import user_create
    from aimon_admin.approvals.rules import tool_rule_create
    from aimon_admin.core.actors import Actor
    from aimon_admin.registry.choices import AnnotationTrust, McpTransport
    from aimon_admin.registry.services import mcp_server_create, mcp_sync_request
    from aimon_admin.runtimes.services import runtime_create, token_issue

    call_command("migrate", "--noinput", verbosity=0)
    actor = Actor.system("benchmark")
    password = "bench-password-not-secret-0123456789"  # noqa: S105 - a throwaway database's
    user_create(username="bench-operator", password=password, roles=[Role.OPERATOR], actor=actor)
    alice = user_create(username="alice", password=password, roles=[Role.APPROVER], actor=actor)
    runtime = runtime_create(name="bench", actor=actor)
    token = token_issue(runtime=runtime, actor=actor, label="benchmark")[1]
    server = mcp_server_create(
        name="notes",
        actor=actor,
        annotation_trust=AnnotationTrust.TRUST,
        transport=McpTransport.STDIO,
        command=SERVER[0],
        args=[*SERVER[1:], str(log)],
        env={"PYTHONPATH": str(ROOT)},
        timeout_seconds=30,
    )
    with transaction.atomic():
        mcp_sync_request(server=server, actor=actor)
    tool_rule_create(text="notes/write_note", action="DENY", actor=actor)
    return token, alice


@contextmanager
def embedded(folder: Path) -> Iterator[int]:
    """`make run`'s shape: SQLite, no Redis, uvicorn in this process; yields its port."""
    import uvicorn

    port = _http.free_port()
    config = uvicorn.Config(
        "aimon_admin.asgi:application",
        host="127.0.0.1",
        port=port,
        lifespan="off",
        access_log=False,
        log_level="warning",
    )
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True


def write_config(folder: Path, port: int, wait: int = 60) -> Path:
    import yaml

    config = folder / "gateway.yaml"
    body = {
        "product_url": f"http://127.0.0.1:{port}",
        "token_env": "AIMON_BENCH_TOKEN",
        "principal": "alice",
        "wait_seconds": wait,
        "servers": "product",
        "secrets": {"notes": {"env": {"PYTHONPATH": str(ROOT)}}},
    }
    config.write_text(yaml.safe_dump(body))
    return config


def log_lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# The stdio gateway under cProfile, timed by the process's CPU clock: on a shared machine a
# wall clock would charge the gateway with the time other processes held the cores.
PROFILED = (
    "import cProfile, sys, time\n"
    "from aimon_client.gateway.cli import main\n"
    "profile = cProfile.Profile(time.process_time)\n"
    "try:\n"
    "    profile.runcall(main, sys.argv[2:])\n"
    "finally:\n"
    "    profile.dump_stats(sys.argv[1])\n"
)


def gateway_argv(config: Path, profile: Path | None) -> list[str]:
    if profile is None:
        return [str(BIN / "aimon-gateway"), "--config", str(config)]
    return [sys.executable, "-c", PROFILED, str(profile), "--config", str(config)]


def children_cpu(*markers: str) -> float:
    """CPU seconds (user + system) of this process's children whose command line holds one of
    the markers (Linux /proc)."""
    ticks = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            command = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and any(m.encode() in command for m in markers):
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


GATEWAY_MARKS = ("aimon-gateway", "aimon_client.gateway.cli")


def spread(name: str, samples: list[float]) -> str:
    return f"  {name:9} p50 {pct(samples, 50):6.2f} ms  p99 {pct(samples, 99):6.2f} ms"


# --- 1 and 2: one stdio session each ---------------------------------------------------------------


async def overhead_and_clicks(
    config: Path, port: int, token: str, log: Path, alice: Any, args: argparse.Namespace
) -> None:
    from aimon_client.client import Client
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {**os.environ, "AIMON_BENCH_TOKEN": token}
    direct_params = StdioServerParameters(command=SERVER[0], args=[*SERVER[1:], str(log)], env=env)
    argv = gateway_argv(config, args.profile)
    gateway_params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(ROOT))
    async with (
        Client(f"http://127.0.0.1:{port}", token) as client,
        stdio_client(direct_params) as (dr, dw),
        ClientSession(dr, dw) as direct,
        stdio_client(gateway_params) as (gr, gw),
        ClientSession(gr, gw) as gateway,
    ):
        await direct.initialize()
        await gateway.initialize()

        async def decide(note: str) -> str:
            decision = await client.tool_decision(
                "read_note", server="notes", arguments={"note": note}, session_id=SESSION, principal="alice"
            )
            return decision.decision

        for _ in range(20):  # warm every path (connections, caches)
            await direct.call_tool("read_note", {"note": "warm"})
            await gateway.call_tool("notes__read_note", {"note": "warm"})
            await decide("warm")
        straight: list[float] = []
        through: list[float] = []
        decided: list[float] = []
        refused = not_allowed = 0
        cpu = (children_cpu(*GATEWAY_MARKS), children_cpu("gateway_servers"))
        for i in range(args.calls):
            start = time.perf_counter()
            result = await direct.call_tool("read_note", {"note": f"n-{i}"})
            straight.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            result = await gateway.call_tool("notes__read_note", {"note": f"n-{i}"})
            through.append((time.perf_counter() - start) * 1000)
            refused += bool(result.is_error)
            start = time.perf_counter()
            not_allowed += await decide(f"n-{i}") != "ALLOW"
            decided.append((time.perf_counter() - start) * 1000)
        gateway_cpu = (children_cpu(*GATEWAY_MARKS) - cpu[0]) * 1000 / args.calls
        server_cpu = (children_cpu("gateway_servers") - cpu[1]) * 1000 / args.calls
        added = [b - a for a, b in zip(straight, through, strict=True)]
        hop = pct(through, 50) - pct(straight, 50) - pct(decided, 50)
        print(
            f"ALLOW call, {args.calls} each, in turn ({refused} refused through the gateway, "
            f"{not_allowed} bare decisions not ALLOW):"
        )
        print(spread("direct", straight))
        print(spread("gateway", through))
        print(
            f"  added     p50 {pct(through, 50) - pct(straight, 50):6.2f} ms  "
            f"p99 {pct(through, 99) - pct(straight, 99):6.2f} ms  "
            f"(paired differences: p50 {pct(added, 50):.2f}, p99 {pct(added, 99):.2f} ms)"
        )
        print(spread("decision", decided) + "  (Client.tool_decision alone, this process)")
        print(f"  so the gateway's MCP hop and its own work: p50 {hop:.2f} ms (added - decision)")
        print(
            f"  CPU per call: the gateway process {gateway_cpu:.2f} ms; the server, called directly, "
            f"{server_cpu:.2f} ms"
        )

        async def click(note: str) -> tuple[float, float] | None:
            """One destructive call through the gateway, allowed by a person's click: click to
            forwarded and the answer's own commit, in ms (None: not forwarded)."""
            clicked: dict[str, float] = {}
            thread = threading.Thread(target=click_when_asked, args=({note: True}, alice, clicked))
            thread.start()
            result = await gateway.call_tool("notes__erase_note", {"note": note})
            thread.join()
            arrived = [e["at"] for e in log_lines(log) if e["arguments"] == {"note": note}]
            if result.is_error or not arrived:
                return None
            return (arrived[0] - clicked[note]) * 1000, (clicked[f"{note} committed"] - clicked[note]) * 1000

        # The first asks after a start meet cold paths (each server process's first long-poll,
        # approval use and answer; this process's first task sent): shown apart, as the
        # allowed calls' warm-up is.
        cold = [await click(f"cold-{i}") for i in range(args.cold_clicks)]
        waits: list[float] = []
        commits: list[float] = []
        refused = 0
        for i in range(args.clicks):
            timed = await click(f"click-{i}")
            if timed is None:
                refused += 1
                continue
            waits.append(timed[0])
            commits.append(timed[1])
        if args.cold_clicks:
            shown = ", ".join("not forwarded" if c is None else f"{c[0]:.0f}" for c in cold)
            print(f"Click to forwarded, the first {args.cold_clicks} asks after the start (ms): {shown}")
        if args.clicks:
            slowest = sorted(((wait, i) for i, wait in enumerate(waits)), reverse=True)[:3]
            print(
                f"Click to forwarded, {args.clicks} asks after those ({refused} not forwarded): "
                f"p50 {pct(waits, 50):.1f} ms  p99 {pct(waits, 99):.1f} ms; of which the answer's "
                f"own commit (the answer service, this process) p50 {pct(commits, 50):.1f} ms  "
                f"p99 {pct(commits, 99):.1f} ms; slowest: "
                + ", ".join(f"#{i} {wait:.0f} ms (its commit {commits[i]:.0f})" for wait, i in slowest)
            )


def click_when_asked(
    plan: dict[str, bool], user: Any, clicked: dict[str, float], timeout: float = 120.0
) -> None:
    """Answer each note's pending request as the plan says (True: *Allow this call*), as soon
    as it is open; one thread and one database connection for every note."""
    from django.db import connection

    from aimon_admin.approvals.choices import Answer
    from aimon_admin.approvals.models import ApprovalRequest
    from aimon_admin.approvals.services.answers import request_answer

    deadline = time.monotonic() + timeout
    left = dict(plan)
    try:
        while left and time.monotonic() < deadline:
            pending = ApprovalRequest.objects.filter(status="PENDING", arguments__note__in=list(left))
            found = list(pending)
            if not found:
                time.sleep(0.005)
            for request in found:
                note = request.arguments["note"]
                clicked[note] = time.time()
                answer = Answer.ALLOW_CALL if left.pop(note) else Answer.DENY
                request_answer(request=request, user=user, answer=answer)
                clicked[f"{note} committed"] = time.time()
    finally:
        connection.close()


# --- 3: 100 sessions over Streamable HTTP ----------------------------------------------------------


async def many_sessions(url: str, log: Path, alice: Any, sessions: int) -> None:
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    before = len(log_lines(log))
    plan = [
        ("read_note", "allow"),
        ("write_note", "deny"),
        ("erase_note", "ask-yes"),
        ("erase_note", "ask-no"),
    ]
    kinds = [plan[i % len(plan)] for i in range(sessions)]
    outcomes: list[tuple[str, str, bool, str] | None] = [None] * sessions
    asks = {f"s-{i}-{kind}": kind == "ask-yes" for i, (_, kind) in enumerate(kinds) if kind.startswith("ask")}
    clicker = threading.Thread(target=click_when_asked, args=(asks, alice, {}), daemon=True)
    clicker.start()

    async def one(i: int) -> None:
        tool, kind = kinds[i]
        note = f"s-{i}-{kind}"
        timeout = httpx2.Timeout(30.0, read=120.0)
        async with (
            httpx2.AsyncClient(timeout=timeout) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool(f"notes__{tool}", {"note": note})
            text = result.content[0].text if result.content else ""
            outcomes[i] = (note, kind, bool(result.is_error), text)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(sessions)))
    seconds = time.perf_counter() - start
    clicker.join(5)
    ran = {e["arguments"]["note"] for e in log_lines(log)[before:]}
    lost = sum(1 for o in outcomes if o is None)
    unallowed = sum(1 for o in outcomes if o and o[1] in ("deny", "ask-no") and o[0] in ran)
    wrong = sum(1 for o in outcomes if o and o[2] != (o[1] in ("deny", "ask-no")))
    print(
        f"{sessions} sessions at once over Streamable HTTP in {seconds:.1f} s: "
        f"{len(ran)} calls reached the server, {unallowed} of them without an ALLOW, "
        f"{lost} sessions without an answer, {wrong} answers other than the decision"
    )


def run(args: argparse.Namespace, folder: Path, port: int, token: str, alice: Any, log: Path) -> None:
    config = write_config(folder, port)
    asyncio.run(overhead_and_clicks(config, port, token, log, alice, args))
    if args.profile:
        print(f"the stdio gateway's profile: {args.profile}")
    if not args.sessions:
        return
    http_port = _http.free_port()
    gateway = subprocess.Popen(
        [str(BIN / "aimon-gateway"), "--config", str(config), "--http", f"127.0.0.1:{http_port}"],
        env={**os.environ, "AIMON_BENCH_TOKEN": token},
    )
    try:
        while not port_open(http_port):
            time.sleep(0.1)
        asyncio.run(many_sessions(f"http://127.0.0.1:{http_port}/mcp", log, alice, args.sessions))
    finally:
        gateway.terminate()
        gateway.wait(30)


def port_open(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def redis_flush(url: str) -> None:
    """Empty the benchmark's own Redis database (the tasks queued for no worker)."""
    import redis

    redis.Redis.from_url(url).flushdb()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", choices=["prod", "embedded"], default="prod")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--clicks", type=int, default=50)
    parser.add_argument("--cold-clicks", type=int, default=5, help="asks before the clicks measured")
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--database", default=BENCH_DB, help="throwaway PostgreSQL database (prod)")
    parser.add_argument("--redis-db", type=int, default=9, help="Redis database number (prod)")
    parser.add_argument("--workers", type=int, default=2, help="granian's workers (prod)")
    parser.add_argument("--threads", type=int, default=2, help="threads per granian worker (prod)")
    parser.add_argument("--profile", type=Path, help="profile the stdio gateway into this file")
    args = parser.parse_args()
    if args.profile:
        args.profile = args.profile.resolve()
    os.environ.update(DJANGO_SETTINGS_MODULE="benchmarks.settings", PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory(prefix="aimon_bench_gateway_") as name:
        folder = Path(name)
        folder.chmod(0o755)
        log = folder / "calls.log"
        if args.shape == "embedded":
            os.environ.update(DATABASE_URL=f"sqlite:///{folder}/bench.sqlite3", CELERY_TASK_ALWAYS_EAGER="1")
            os.environ.pop("REDIS_URL", None)
            token, alice = setup(log)
            print("embedded shape: SQLite, uvicorn in this process", flush=True)
            with embedded(folder) as port:
                run(args, folder, port, token, alice, log)
            return 0
        redis_url = f"redis://127.0.0.1:6379/{args.redis_db}"
        redis_flush(redis_url)
        with _http.throwaway_pg(args.database) as url:
            env = dict(os.environ, DATABASE_URL=url, REDIS_URL=redis_url)
            env.pop("CELERY_TASK_ALWAYS_EAGER", None)
            # This process's set-up (the server's first sync) runs its tasks in place.
            os.environ.update(DATABASE_URL=url, REDIS_URL=redis_url, CELERY_TASK_ALWAYS_EAGER="1")
            token, alice = setup(log)
            # This process clicks as a web node answers: loaded, then frozen as wsgi.py freezes it.
            gc.freeze()
            from aimon_admin.celery import app

            # The clicks, as the web request they stand for, queue their tasks (notifications)
            # for a worker; nothing here runs them (the topology has no worker).
            app.conf.task_always_eager = False
            port = _http.free_port()
            print(
                f"make prod's shape: nginx, granian {args.workers}x{args.threads}, uvicorn 1 for "
                f"long-polls, PostgreSQL {args.database}, Redis db {args.redis_db}",
                flush=True,
            )
            (folder / "prod").mkdir()
            with servers.topology(env, port, args.workers, args.threads, folder / "prod"):
                _http.wait_until_up(port, token, timeout=60)
                run(args, folder, port, token, alice, log)
            from django.db import connections

            connections.close_all()
        redis_flush(redis_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
