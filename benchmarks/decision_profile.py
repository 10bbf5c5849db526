"""Where a skill decision's server time goes, against the bare endpoint: a profile.

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/decision_profile.py              # PostgreSQL, 3 rounds of 3,000
    .venv/bin/python benchmarks/decision_profile.py --requests 5000 --top 30

The same state as benchmarks/skill_decisions.py (a throwaway PostgreSQL database, one
runtime, 1,000 rules, two granted sessions; 3 skills answered by three layers), served
in process by Django's WSGI handler (what granian calls in make prod's topology), with no
server and no network in between: what is left is the product's own cost per request.

1. CPU per request (`time.process_time`, this process; PostgreSQL's backend is another
   process and is reported by `load.py`), in alternating rounds of `/bench/baseline` (the
   same token lookup, a small JSON body) and `POST /api/v1/skill-decisions`; the median
   of each and their ratio.
2. A deterministic profile (cProfile, timed by this process's CPU clock, so the wait for
   PostgreSQL's answers is not counted) of each endpoint's requests: CPU per request by
   phase (Django's request path and middleware, DRF's, the decision itself, the database
   driver, JSON) and the functions where the difference is spent.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _http

BENCH_DB = "aimon_bench_profile"
BASELINE = "/bench/baseline"
DECISIONS = "/api/v1/skill-decisions"
BODY = json.dumps(
    {
        "skills": ["deploy-prod", "notify-team", "read-file"],
        "session_id": "s-bench",
        "invoking_session_id": "s-parent",
        "turn_id": "t-1",
        "principal": "bench-operator",
    }
).encode()

# Phases, by the file a function lives in: its own time is charged to the first that matches.
PHASES = (
    ("the decision (aimon_admin.approvals)", "aimon_admin/approvals/"),
    ("token lookup (aimon_admin.runtimes)", "aimon_admin/runtimes/"),
    ("aimon_admin.core (middleware, raw SQL, pool)", "aimon_admin/core/"),
    ("the rest of aimon_admin", "aimon_admin/"),
    ("benchmarks (the bare endpoint)", "benchmarks/"),
    ("DRF", "rest_framework/"),
    ("Django: request, middleware, response", "django/core/handlers/"),
    ("Django: urls", "django/urls/"),
    ("Django: database layer", "django/db/"),
    ("Django: other", "django/"),
    ("psycopg and its pool", "psycopg"),
    ("json", "/json/"),
)


def _environ(path: str, token: str, body: bytes | None) -> dict[str, object]:
    environ: dict[str, object] = {
        "REQUEST_METHOD": "POST" if body is not None else "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1",
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if body is not None:
        environ["CONTENT_TYPE"] = "application/json"
        environ["CONTENT_LENGTH"] = str(len(body))
    return environ


def _profile_child(token: str, requests: int, rounds: int, top: int) -> None:
    import django

    django.setup()
    from django.core.handlers.wsgi import WSGIHandler

    handler = WSGIHandler()

    def call(path: str, body: bytes | None) -> bytes:
        environ = _environ(path, token, body)
        environ["wsgi.input"] = io.BytesIO(body or b"")
        status: list[str] = []
        chunks = handler(environ, lambda s, h, *a: status.append(s))
        out = b"".join(chunks)
        if hasattr(chunks, "close"):
            chunks.close()
        if not status[0].startswith("200"):
            raise SystemExit(f"{path} answered {status[0]}: {out[:200]!r}")
        return out

    answer = json.loads(call(DECISIONS, BODY))
    got = [(d["skill"], d["decision"], d["source"]) for d in answer["decisions"]]
    expected = [
        ("deploy-prod", "ALLOW", "SESSION"),
        ("notify-team", "ALLOW", "INVOKING_SESSION"),
    ]
    if got[:2] != expected or got[2][2] != "RULE":
        raise SystemExit(f"unexpected decisions: {got}")

    targets = {"baseline": (BASELINE, None), "decision": (DECISIONS, BODY)}
    for _ in range(300):  # warm: caches, prepared statements, the pool
        for path, body in targets.values():
            call(path, body)

    cpu: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, (path, body) in targets.items():
            start = time.process_time()
            for _ in range(requests):
                call(path, body)
            cpu[name].append((time.process_time() - start) / requests * 1000)

    profiles: dict[str, pstats.Stats] = {}
    for name, (path, body) in targets.items():
        profiler = cProfile.Profile(time.process_time)  # CPU, not the wait for PostgreSQL
        profiler.enable()
        for _ in range(requests):
            call(path, body)
        profiler.disable()
        profiles[name] = pstats.Stats(profiler)

    report = {"cpu_ms": cpu, "phases": {}, "functions": {}}
    for name, stats in profiles.items():
        phases: dict[str, float] = {}
        functions: list[tuple[float, float, int, str]] = []
        for (filename, line, func), (_cc, calls, own, total, _callers) in stats.stats.items():  # type: ignore[attr-defined]
            phase = next((label for label, part in PHASES if part in filename), "other (stdlib, C)")
            phases[phase] = phases.get(phase, 0.0) + own
            short = filename.split("site-packages/")[-1].split("/work/main/")[-1]
            functions.append((own, total, calls, f"{short}:{line} {func}"))
        report["phases"][name] = {k: v / requests * 1000 for k, v in phases.items()}
        functions.sort(reverse=True)
        report["functions"][name] = [
            (own / requests * 1000, total / requests * 1000, calls / requests, label)
            for own, total, calls, label in functions[:top]
        ]
        functions.sort(key=lambda row: row[1], reverse=True)
        report.setdefault("cumulative", {})[name] = [
            (own / requests * 1000, total / requests * 1000, calls / requests, label)
            for own, total, calls, label in functions[: top * 2]
        ]
    print(json.dumps(report))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=3000, help="requests per round and per profile")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=25, help="functions listed per endpoint")
    parser.add_argument("--conn-max-age", type=int, default=0, help="0: the pool, as production")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        token, requests, rounds, top = args.child
        _profile_child(token, int(requests), int(rounds), int(top))
        return 0

    with _http.throwaway_pg(BENCH_DB) as url:
        env = _http.server_env(url, args)
        token = _http.child_json("benchmarks/skill_decisions.py", "--seed", env)["token"]
        out = subprocess.run(
            [_http.PYTHON, __file__, "--child", token, str(args.requests), str(args.rounds), str(args.top)],
            cwd=_http.ROOT,
            env=dict(env, PYTHONHASHSEED="0"),
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            return 1
    report = json.loads(out.stdout.strip().splitlines()[-1])
    base = statistics.median(report["cpu_ms"]["baseline"])
    decision = statistics.median(report["cpu_ms"]["decision"])
    print(f"In-process CPU per request (WSGI handler, no server, {args.rounds} rounds of {args.requests}):")
    medians = (("bare endpoint ", "baseline", base), ("skill decision", "decision", decision))
    for label, name, value in medians:
        rounds = ", ".join(f"{v:.3f}" for v in report["cpu_ms"][name])
        print(f"  {label}  {value:.3f} ms   rounds {rounds}")
    print(f"  ratio bare / decision: {base / decision:.2f}   the decision's extra: {decision - base:.3f} ms")
    print("\nProfiled CPU per request by phase (cProfile inflates every call; compare, not add):")
    phases = sorted(set(report["phases"]["baseline"]) | set(report["phases"]["decision"]))
    print(f"  {'phase':46} {'bare':>8} {'decision':>9} {'extra':>8}")
    bare, dec = report["phases"]["baseline"], report["phases"]["decision"]
    rows = [(dec.get(p, 0.0) - bare.get(p, 0.0), p) for p in phases]
    for _extra, phase in sorted(rows, reverse=True):
        b = report["phases"]["baseline"].get(phase, 0.0)
        d = report["phases"]["decision"].get(phase, 0.0)
        print(f"  {phase:46} {b:8.3f} {d:9.3f} {d - b:+8.3f}")
    for name in ("decision", "baseline"):
        print(f"\nTop functions by own time, {name} (ms per request: own, total; calls per request):")
        for own, total, calls, label in report["functions"][name]:
            print(f"  {own:7.4f} {total:7.4f} {calls:6.1f}  {label}")
    for name in ("decision", "baseline"):
        print(f"\nTop functions by total time (callees included), {name}:")
        for own, total, calls, label in report["cumulative"][name]:
            print(f"  {own:7.4f} {total:7.4f} {calls:6.1f}  {label}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    sys.exit(main())
