"""Do the hot path's specials still pay in make prod's topology?

Each must save at least 10% of the server CPU per request to stay.

Run by hand (never by CI), from the project root; needs `wrk` and nginx:

    .venv/bin/python benchmarks/specials.py --seconds 5 --rounds 3

One throwaway PostgreSQL database seeded as benchmarks/skill_decisions.py seeds it, then
make prod's web topology (nginx, granian, uvicorn: benchmarks/servers.py `topology`).
Server CPU per request (the servers', nginx's and their PostgreSQL backends', from /proc)
is the figure: the machine is shared, so the rounds of a comparison alternate.

- API style (run at commit 8572663, `git show 8572663:benchmarks/specials.py`, while the
  plain views existed): the decision endpoints as plain Django views (runtimes/api/plain.py)
  against the same handlers served by DRF, CPU x1.09 for DRF: under the 10% bar, so every
  endpoint is DRF now (README, Performance).
- Pool: the product's backend against Django's own (BENCH_STOCK_POOL=1 in
  benchmarks/settings.py), the topology restarted for each round, alternately. Run at
  8572663, when ours checked a borrowed connection's socket first: Django's (psycopg-pool's
  standard check, a round trip) cost x0.99 of it, so the peek went. Now both check the same
  way and ours differs only by its capped reconnect back-off (core/dbpool.py), which costs
  nothing while the database is up: this run shows that.
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

BENCH_DB = "aimon_bench_specials"
SKILL_BODY = json.dumps(skill_decisions.BODY)
TWO_STEP = "/bench/skill-decisions-two-step"


def cpu_ms_per_request(
    port: int, sessions: list[int], database: str, token: str, path: str, body: str, args: argparse.Namespace
) -> tuple[float, float]:
    """(server CPU ms per request, requests/s) of one wrk round."""
    before = servers._cpu(sessions, database)
    requests, elapsed = _http.run_wrk(port, path, token, [body], args.seconds, args.connections)
    used = servers._cpu(sessions, database) - before
    return used * 1000 / requests, requests / elapsed


def pool_check(args: argparse.Namespace, env: dict[str, str], token: str, database: str) -> None:
    path, body = TWO_STEP, SKILL_BODY
    figures: dict[str, list[float]] = {"ours (product backend)": [], "stock (Django backend)": []}
    for round_number in range(args.rounds):
        # A B, then B A: whichever runs second in a round (a warmer database, a busier
        # moment) is not always the same one.
        for name in list(figures)[:: 1 if round_number % 2 == 0 else -1]:
            port = _http.free_port()
            run_env = dict(env, BENCH_STOCK_POOL="1" if name.startswith("stock") else "0")
            with (
                tempfile.TemporaryDirectory(prefix="aimon_bench_specials_") as folder,
                servers.topology(run_env, port, args.workers, args.threads, Path(folder)) as sessions,
            ):
                _http.wait_until_up(port, token, timeout=60)
                skill_decisions.check_answer(port, path, token, body)
                _http.run_wrk(port, path, token, [body], 2, args.connections)  # warm up
                figures[name].append(cpu_ms_per_request(port, sessions, database, token, path, body, args)[0])
    print(f"Pool borrow check on {path}, server CPU ms per request:")
    for name, values in figures.items():
        print(f"  {name:20} {statistics.median(values):6.3f} ms  rounds {[round(v, 3) for v in values]}")
    ours, stock = figures.values()
    pairs = [s / o for o, s in zip(ours, stock, strict=True)]
    print(
        f"  stock / ours: CPU x{statistics.median(pairs):.3f} (pairs {', '.join(f'{x:.3f}' for x in pairs)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    servers.topology_arguments(parser)
    args = parser.parse_args()
    with _http.throwaway_pg(BENCH_DB) as url:
        env = _http.server_env(url, args)
        token = _http.child_json(skill_decisions.__file__, "--seed", env)["token"]
        database = urllib.parse.urlsplit(url).path.lstrip("/")
        pool_check(args, env, token, database)
    return 0


if __name__ == "__main__":
    sys.exit(main())
