"""The floor: what each layer under a decision costs, in make prod's topology, in one run.

Run by hand (never by CI), from the project root; needs `wrk` and nginx:

    .venv/bin/python benchmarks/floor.py [--seconds 5] [--rounds 3] [--connections 8]

One throwaway PostgreSQL database seeded as benchmarks/skill_decisions.py seeds it (a runtime,
1,000 rules, granted sessions). Then make prod's topology (nginx in front of granian, 2
workers x 2 threads, and uvicorn: benchmarks/servers.py `topology`), started four ways in
turn, each measured with `wrk -t1 -cN` (closed loop), every answer checked 200:

1. a plain WSGI callable with no Django (benchmarks/floor_apps.py `hello`): nginx and granian
   alone, the ceiling of anything served this way;
2. Django with no middleware and one view answering the same JSON (benchmarks.settings_floor):
   Django's own request path;
3. the same with the token's row read by a prepared statement through the pool (`/read`):
   Django, a pooled connection and one indexed read, the least a decision does;
4. the product's bare endpoint with that same prepared read (`/bench/baseline-prepared`): the
   runtime API's lean stack added;
5. the product's bare endpoint (`/bench/baseline`: the lean stack and the token lookup as
   the API's authentication makes it, planned by PostgreSQL at each call);
6. the product's skill decision (3 skills answered by three layers).

Printed per layer: requests/s, p99, and server CPU per request (granian's, uvicorn's and
nginx's processes and the PostgreSQL backends, from /proc), medians of the rounds, and each
layer's requests/s as a share of the one above it and of the floor. The rounds of the four
alternate (each layer's servers are started once per round), so a noisy moment spreads
across them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _http, servers, skill_decisions

BENCH_DB = "aimon_bench_floor"
# (label, DJANGO_SETTINGS_MODULE, the WSGI application granian serves, the path asked)
LAYERS = (
    ("WSGI hello, no Django", "benchmarks.settings", "benchmarks.floor_apps:hello", "/hello"),
    ("Django, no middleware", "benchmarks.settings_floor", "aimon_admin.wsgi:application", "/hello"),
    ("Django, one prepared read", "benchmarks.settings_floor", "aimon_admin.wsgi:application", "/read"),
    (
        "product, bare, prepared",
        "benchmarks.settings",
        "aimon_admin.wsgi:application",
        servers.BASELINE_PREPARED,
    ),
    ("product, bare endpoint", "benchmarks.settings", "aimon_admin.wsgi:application", servers.BASELINE),
    ("product, skill decision", "benchmarks.settings", "aimon_admin.wsgi:application", servers.DECISIONS),
)


def one_round(args: argparse.Namespace, env: dict[str, str], token: str) -> dict[str, servers.Figure]:
    database = urllib.parse.urlsplit(env["DATABASE_URL"]).path.lstrip("/")
    figures: dict[str, servers.Figure] = {}
    for label, settings_module, app, path in LAYERS:
        port = _http.free_port()
        layer_env = dict(env, DJANGO_SETTINGS_MODULE=settings_module)
        with (
            tempfile.TemporaryDirectory(prefix="aimon_bench_floor_") as folder,
            servers.topology(layer_env, port, args.workers, args.threads, Path(folder), app=app) as sessions,
        ):
            _http.wait_until_up(port, token, timeout=60)
            if path == servers.DECISIONS:
                skill_decisions.check_answer(port, path, token, json.dumps(skill_decisions.BODY))
            servers.wrk(port, path, token, 2, args.connections)  # warm
            before = servers._cpu(sessions, database)
            requests, elapsed, p99 = servers.wrk(port, path, token, args.seconds, args.connections)
            used = servers._cpu(sessions, database) - before
        figures[label] = servers.Figure(requests / elapsed, p99, used * 1000 / requests)
        print(
            f"  {label:24} {figures[label].rate:7,.0f}/s  p99 {p99:6.2f} ms  "
            f"{figures[label].cpu_ms:5.2f} ms server CPU per request",
            flush=True,
        )
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    servers.topology_arguments(parser)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    rounds: list[dict[str, servers.Figure]] = []
    with _http.throwaway_pg(BENCH_DB) as url:
        env = _http.server_env(url, args)
        token = _http.child_json(skill_decisions.__file__, "--seed", env)["token"]
        for number in range(args.rounds):
            print(f"round {number + 1} of {args.rounds}", flush=True)
            rounds.append(one_round(args, env, token))
    print(f"\nmedians of {args.rounds} rounds (wrk -t1 -c{args.connections}, {args.seconds} s each):")
    floor = above = None
    for label, *_ in LAYERS:
        rate = statistics.median(r[label].rate for r in rounds)
        p99 = statistics.median(r[label].p99_ms for r in rounds)
        cpu = statistics.median(r[label].cpu_ms for r in rounds)
        floor = floor or rate
        shares = f"{rate / above:.2f} of the layer above, " if above else ""
        print(
            f"  {label:24} {rate:7,.0f}/s  p99 {p99:6.2f} ms  {cpu:5.2f} ms CPU/req  "
            f"({shares}{rate / floor:.2f} of the floor)"
        )
        above = rate
    return 0


if __name__ == "__main__":
    sys.exit(main())
