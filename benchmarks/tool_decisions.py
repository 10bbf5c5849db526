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
* `/api/v1/tool-decisions`: the real endpoint, cycling through the registered tools;
* the same endpoint with each call's `arguments` (U1-U7), while 1,000
  argument rules (20 on each of 50 tools: ALLOW, ASK and DENY prefixes, some per runtime,
  pre-approvals) and those tools' subject arguments are in force.

Rounds alternate baseline / decisions / decisions with arguments so drift hits them alike;
the median of each is reported with their ratios. The targets: decisions at least 0.80 of the
baseline, and decisions with arguments and 1,000 rules at least 0.90 of the plain decisions.
The rules are there for both decision series (it is one server). On a shared machine the
wall-clock figures move with everyone else's load, so each round also reads the CPU time the
server's processes spent (from /proc) and reports requests per server CPU second: the cost of
each endpoint whatever else the machine is doing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _http

BENCH_DB = "aimon_bench"
LOCAL_TOOLS = 300
MCP_TOOLS = 100
TARGET_RATIO = 0.80
RULES = 1000
RULED_TOOLS = 50
TARGET_RULES_RATIO = 0.90


# --- Throwaway state (runs in a child process with the benchmark's environment) -------------------


def seed() -> None:
    """Create the runtime, its token and the tools; print the token and the tool names as JSON."""
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
    _seed_rules(runtime, [t["name"] for t in tools[:RULED_TOOLS]])
    print(json.dumps({"token": token, "tools": [t["name"] for t in tools]}))


def _seed_rules(runtime: object, names: list[str]) -> None:
    """1,000 argument rules over 50 tools, each tool's subject its `arg` (U1, U5)."""
    from django.db import transaction

    from aimon_admin.approvals import rule_version
    from aimon_admin.approvals.models import ToolRule
    from aimon_admin.registry.models import ToolSubject

    per_tool = RULES // len(names)
    actions = ["ALLOW", "ASK", "DENY"]
    with transaction.atomic():
        ToolSubject.objects.bulk_create(ToolSubject(server="", tool=name, argument="arg") for name in names)
        ToolRule.objects.bulk_create(
            ToolRule(
                runtime=runtime if j % 4 == 0 else None,
                tool=name,
                pattern=f"cmd{j} sub:*",
                action=actions[j % 3],
                unattended=j % 4 == 0 and actions[j % 3] == "ALLOW",
            )
            for name in names
            for j in range(per_tool)
        )
        rule_version.rule_set_version_bump()


# --- Load ------------------------------------------------------------------------------------------


def bodies(tools: list[str]) -> list[str]:
    # Attended and unattended, every tool in turn: every decision reason the gate has.
    return [
        json.dumps({"tool": name, "server": None, "session_id": "s-1" if i % 2 else None})
        for i, name in enumerate(tools)
    ]


def bodies_with_arguments(tools: list[str]) -> list[str]:
    # The ruled tools, attended and unattended, subjects that match a rule and ones that do not.
    return [
        json.dumps(
            {
                "tool": name,
                "server": None,
                "session_id": "s-1" if i % 2 else None,
                "arguments": {"arg": f"cmd{i % 30} sub --flag {i}", "cwd": "/srv/app", "timeout": 30},
            }
        )
        for i, name in enumerate(tools[:RULED_TOOLS] * 4)
    ]


def measure(label: str, database_url: str, args: argparse.Namespace) -> tuple[float, float, float]:
    env = _http.server_env(database_url, args)
    seeded = _http.child_json(__file__, "--seed", env)
    token = seeded["token"]
    decision_bodies = bodies(seeded["tools"])
    argument_bodies = bodies_with_arguments(seeded["tools"])
    run, client = _http.load_runner(args)
    paths = ["/bench/baseline", "/api/v1/tool-decisions"]
    # Its server CPU is uvicorn's alone, as this benchmark has always counted it.
    series = [(paths[0], decision_bodies), (paths[1], decision_bodies), (paths[1], argument_bodies)]
    with _http.uvicorn(env, token, args, database_cpu=False) as server:
        for path, payloads in series:
            run(server.port, path, token, payloads, 2, args.connections)  # warm-up
        # The three in turn, round after round, so drift in the machine's load hits them alike.
        rounds: list[list[_http.Round]] = [[], [], []]
        for _ in range(args.rounds):
            for done, (path, payloads) in zip(rounds, series, strict=True):
                done.append(_http.one_round(run, server, path, token, payloads, args))
    base, real, ruled = rounds
    b, r = statistics.median(x.rate for x in base), statistics.median(x.rate for x in real)
    bc, rc = statistics.median(x.per_cpu for x in base), statistics.median(x.per_cpu for x in real)
    a, ac = statistics.median(x.rate for x in ruled), statistics.median(x.per_cpu for x in ruled)
    print(
        f"{label}: baseline {b:,.0f} req/s, tool-decisions {r:,.0f} req/s, ratio {r / b:.2f}; "
        f"per server CPU second {bc:,.0f} vs {rc:,.0f}, ratio {rc / bc:.2f} (target {TARGET_RATIO:.2f})\n"
        f"    median of {args.rounds} x {args.seconds}s rounds, {client}, {args.connections} connections, "
        f"{args.workers} uvicorn worker(s), CONN_MAX_AGE={args.conn_max_age}"
    )
    print(f"    baseline rounds req/s: {', '.join(f'{x.rate:,.0f}' for x in base)}")
    print(f"    decision rounds req/s: {', '.join(f'{x.rate:,.0f}' for x in real)}")
    print(
        f"    with arguments and {RULES:,} rules: {a:,.0f} req/s, ratio {a / r:.2f} to plain decisions; "
        f"per server CPU second {ac:,.0f}, ratio {ac / rc:.2f} (target {TARGET_RULES_RATIO:.2f})"
    )
    return b, r, a


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    _http.add_common_arguments(parser, db="both")
    parser.add_argument("--seed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seed:
        seed()
        return 0

    met = []
    if args.db in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="aimon_bench_") as folder:
            b, r, a = measure("SQLite", f"sqlite:///{folder}/bench.sqlite3", args)
            met.append(r / b >= TARGET_RATIO and a / r >= TARGET_RULES_RATIO)
    if args.db in ("postgres", "both"):
        with _http.throwaway_pg(BENCH_DB) as url:
            b, r, a = measure("PostgreSQL", url, args)
            met.append(r / b >= TARGET_RATIO and a / r >= TARGET_RULES_RATIO)
    return 0 if all(met) else 1


if __name__ == "__main__":
    sys.exit(main())
