"""The MCP gateway (G2): what it adds to a call, click to forwarded, and 100 sessions at once.

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/gateway.py [--calls 500] [--clicks 50] [--sessions 100]

One node on the embedded shape: a SQLite file in a temporary folder, no Redis, uvicorn in
this process (as `make run`), so a click's wake-up is an in-process event. Behind the gateway,
an MCP server built with the SDK (tests/clients/gateway_servers.py, `counting`) that logs the
moment each call arrives. Prints figures; asserts nothing.

1. ALLOW overhead: the same read-only call, alternately straight to the server (the MCP SDK's
   client over stdio) and through `aimon-gateway` (stdio), side by side in one run: p50/p99
   of each and of the difference.
2. Click to forwarded: a destructive call through the gateway asks; the approver's answer
   (*Allow this call*, through the product's answer service as the inbox button calls it)
   is timed to the moment the server logs the call.
3. 100 MCP sessions at once through one gateway over Streamable HTTP, a third each ALLOW
   (read), DENY (an operator's rule) and ASK (half allowed, half denied by a person): how many
   calls reached the server without an ALLOW, and how many sessions got no answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SERVER = [sys.executable, "-m", "tests.clients.gateway_servers", "--mode", "counting", "--log"]


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def setup(folder: Path, log: Path) -> tuple[str, Any, Any]:
    """Migrate, people, a runtime and its token, the counting server registered and synced."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="benchmarks.settings",
        DATABASE_URL=f"sqlite:///{folder}/bench.sqlite3",
        CELERY_TASK_ALWAYS_EAGER="1",
        PYTHONPATH=str(ROOT),
    )
    os.environ.pop("REDIS_URL", None)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction

    from aimon_admin.accounts.roles import Role
    from aimon_admin.accounts.services import user_create
    from aimon_admin.approvals.tool_rules import tool_rule_create
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
    return token, alice, actor


def serve_product(port: int) -> Any:
    import uvicorn

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
    return server


def write_config(folder: Path, port: int, log: Path, wait: int = 60) -> Path:
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


# --- 1 and 2: one stdio session each ---------------------------------------------------------------


async def overhead_and_clicks(
    config: Path, token: str, log: Path, alice: Any, calls: int, clicks: int
) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {**os.environ, "AIMON_BENCH_TOKEN": token}
    direct_params = StdioServerParameters(command=SERVER[0], args=[*SERVER[1:], str(log)], env=env)
    gateway_params = StdioServerParameters(
        command=str(BIN / "aimon-gateway"), args=["--config", str(config)], env=env
    )
    async with (
        stdio_client(direct_params) as (dr, dw),
        ClientSession(dr, dw) as direct,
        stdio_client(gateway_params) as (gr, gw),
        ClientSession(gr, gw) as gateway,
    ):
        await direct.initialize()
        await gateway.initialize()
        for _ in range(20):  # warm both paths (connections, caches)
            await direct.call_tool("read_note", {"note": "warm"})
            await gateway.call_tool("notes__read_note", {"note": "warm"})
        straight: list[float] = []
        through: list[float] = []
        refused = 0
        for i in range(calls):
            start = time.perf_counter()
            result = await direct.call_tool("read_note", {"note": f"n-{i}"})
            straight.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            result = await gateway.call_tool("notes__read_note", {"note": f"n-{i}"})
            through.append((time.perf_counter() - start) * 1000)
            refused += bool(result.is_error)
        added = [b - a for a, b in zip(straight, through, strict=True)]
        print(f"ALLOW call, {calls} each, alternating ({refused} refused through the gateway):")
        print(f"  direct   p50 {pct(straight, 50):6.2f} ms  p99 {pct(straight, 99):6.2f} ms")
        print(f"  gateway  p50 {pct(through, 50):6.2f} ms  p99 {pct(through, 99):6.2f} ms")
        print(
            f"  added    p50 {pct(through, 50) - pct(straight, 50):6.2f} ms  "
            f"p99 {pct(through, 99) - pct(straight, 99):6.2f} ms  "
            f"(paired differences: p50 {pct(added, 50):.2f}, p99 {pct(added, 99):.2f} ms)"
        )

        waits: list[float] = []
        refused = 0
        for i in range(clicks):
            note = f"click-{i}"
            clicked: dict[str, float] = {}
            thread = threading.Thread(target=click_when_asked, args=(note, alice, clicked))
            thread.start()
            result = await gateway.call_tool("notes__erase_note", {"note": note})
            thread.join()
            arrived = [e["at"] for e in log_lines(log) if e["arguments"] == {"note": note}]
            if result.is_error or not arrived:
                refused += 1
                continue
            waits.append((arrived[0] - clicked["at"]) * 1000)
        print(
            f"Click to forwarded, {clicks} asks ({refused} not forwarded): "
            f"p50 {pct(waits, 50):.1f} ms  p99 {pct(waits, 99):.1f} ms"
        )


def click_when_asked(note: str, user: Any, clicked: dict[str, float], allow: bool = True) -> None:
    from django.db import connection

    from aimon_admin.approvals.choices import Answer
    from aimon_admin.approvals.models import ApprovalRequest
    from aimon_admin.approvals.services.answers import request_answer

    while (
        request := ApprovalRequest.objects.filter(arguments={"note": note}, status="PENDING").first()
    ) is None:
        time.sleep(0.005)
    clicked["at"] = time.time()
    request_answer(request=request, user=user, answer=Answer.ALLOW_CALL if allow else Answer.DENY)
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

    async def one(i: int) -> None:
        tool, kind = kinds[i]
        note = f"s-{i}-{kind}"
        if kind.startswith("ask"):
            args = (note, alice, {}, kind == "ask-yes")
            threading.Thread(target=click_when_asked, args=args, daemon=True).start()
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
    ran = {e["arguments"]["note"] for e in log_lines(log)[before:]}
    lost = sum(1 for o in outcomes if o is None)
    unallowed = sum(1 for o in outcomes if o and o[1] in ("deny", "ask-no") and o[0] in ran)
    wrong = sum(1 for o in outcomes if o and o[2] != (o[1] in ("deny", "ask-no")))
    print(
        f"{sessions} sessions at once over Streamable HTTP in {seconds:.1f} s: "
        f"{len(ran)} calls reached the server, {unallowed} of them without an ALLOW, "
        f"{lost} sessions without an answer, {wrong} answers other than the decision"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--clicks", type=int, default=50)
    parser.add_argument("--sessions", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aimon_bench_gateway_") as name:
        folder = Path(name)
        log = folder / "calls.log"
        token, alice, _ = setup(folder, log)
        port = free_port()
        product = serve_product(port)
        config = write_config(folder, port, log)
        asyncio.run(overhead_and_clicks(config, token, log, alice, args.calls, args.clicks))
        http_port = free_port()
        gateway = subprocess.Popen(
            [str(BIN / "aimon-gateway"), "--config", str(config), "--http", f"127.0.0.1:{http_port}"],
            env={**os.environ, "AIMON_BENCH_TOKEN": token},
        )
        try:
            while socket.socket().connect_ex(("127.0.0.1", http_port)) != 0:
                time.sleep(0.1)
            asyncio.run(many_sessions(f"http://127.0.0.1:{http_port}/mcp", log, alice, args.sessions))
        finally:
            gateway.terminate()
            gateway.wait(30)
            product.should_exit = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
