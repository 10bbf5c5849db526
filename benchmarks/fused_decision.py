"""Does the skill decision's fused prepared statement still pay in make prod's topology?

Run by hand (never by CI), from the project root; needs `wrk` and nginx:

    .venv/bin/python benchmarks/fused_decision.py --rounds 4 --seconds 5

One throwaway PostgreSQL database (`aimon_bench_fused`), seeded as
benchmarks/skill_decisions.py seeds it. make prod's topology (nginx, granian, uvicorn:
benchmarks/servers.py's `topology`) serves benchmarks.urls; then, alternating in each
round, `wrk` against `POST /api/v1/skill-decisions` (the product's endpoint, whichever read
it does) and `POST /bench/skill-decisions-two-step` (the token authenticated first, then the
decision's read: the plain path). Printed: requests/s and server CPU milliseconds per
request (granian, uvicorn, nginx and the PostgreSQL backends, from /proc), medians over the
rounds, and the ratio of the two. The fused statement stays only if it saves ≥ 10% of that
CPU per request, the bar every special on the hot path must clear.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _http, servers, skill_decisions

BENCH_DB = "aimon_bench_fused"
PATHS = {"endpoint": servers.DECISIONS, "two-step": "/bench/skill-decisions-two-step"}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    args.conn_max_age = 0
    with _http.throwaway_pg(BENCH_DB) as url:
        env = _http.server_env(url, args)
        token = _http.child_json(skill_decisions.__file__, "--seed", env)["token"]
        database = urllib.parse.urlsplit(env["DATABASE_URL"]).path.lstrip("/")
        port = _http.free_port()
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in PATHS}
        with (
            tempfile.TemporaryDirectory(prefix="aimon_bench_fused_") as folder,
            servers.topology(env, port, args.workers, args.threads, Path(folder)) as sessions,
        ):
            _http.wait_until_up(port, token, timeout=60)
            body = json.dumps(skill_decisions.BODY)
            for path in PATHS.values():
                skill_decisions.check_answer(port, path, token, body)
                servers.wrk(port, path, token, 2, args.connections)
            for round_no in range(args.rounds):
                order = list(PATHS.items()) if round_no % 2 == 0 else list(PATHS.items())[::-1]
                for name, path in order:
                    before = servers._cpu(sessions, database)
                    requests, elapsed, _ = servers.wrk(port, path, token, args.seconds, args.connections)
                    used = servers._cpu(sessions, database) - before
                    figures[name].append((requests / elapsed, used * 1000 / requests))
                    print(f"round {round_no + 1} {name:9} {requests / elapsed:7,.0f}/s "
                          f"{used * 1000 / requests:5.2f} ms CPU/req", flush=True)  # fmt: skip
    cpu = {name: statistics.median(c for _, c in rows) for name, rows in figures.items()}
    rate = {name: statistics.median(r for r, _ in rows) for name, rows in figures.items()}
    for name in PATHS:
        print(f"{name:9} median {rate[name]:7,.0f}/s {cpu[name]:5.2f} ms CPU/req")
    print(f"endpoint CPU/req as a share of two-step's: {cpu['endpoint'] / cpu['two-step']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
