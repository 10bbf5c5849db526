"""Skill decisions: HTTP throughput against the bare baseline, and the chain's own cost.

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/skill_decisions.py                   # PostgreSQL
    .venv/bin/python benchmarks/skill_decisions.py --db both --seconds 5
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/skill_decisions.py

State is throwaway: a PostgreSQL database named `aimon_bench_approvals`, created and
dropped here (never anyone else's), or a SQLite file in a temporary folder. It holds one
runtime and its token, 1,000 skill rules (exact names, prefix globs, mid-name wildcards,
runtime-specific ones), and two sessions with grants, so the 3 skills asked about are
answered by three different layers: `deploy-prod` by the session (SESSION),
`notify-team` by the invoking session (INVOKING_SESSION), `read-file` by a rule (RULE).

1. Chain evaluation, in process, 1,000 rules (target p99 ≤ 1 ms): the pure part (rule
   index searches, uncached, and `chain_decide` for the 3 skills), the index's worst case (a
   200-character skill no rule matches) on its own, and `skills_decide` whole, with its
   queries. Each in 5 trials; the best trial's p99 is the figure least disturbed by
   whatever else the machine runs, the median trial's the typical one.
2. Throughput over real HTTP on 127.0.0.1: uvicorn with benchmarks.settings, driven by
   `wrk` (or threads with http.client) over keep-alive connections, alternating rounds of
   `/bench/baseline` (the same token lookup, a small JSON body) and
   `/api/v1/skill-decisions`; the median of each and their ratio (target ≥ 0.80).
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
BENCH_DB = "aimon_bench_approvals"
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/postgres"
RULES = 1000
TARGET_RATIO = 0.80
TARGET_P99_MS = 1.0
TRIALS = 5
SKILLS = ["deploy-prod", "notify-team", "read-file"]
BODY = {
    "skills": SKILLS,
    "session_id": "s-bench",
    "invoking_session_id": "s-parent",
    "turn_id": "t-1",
    "principal": "bench-operator",
}


# --- Child processes (the benchmark's environment, Django set up) ---------------------------------


def _django() -> None:
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def rule_specs() -> list[tuple[str, str, bool]]:
    """(pattern, action, runtime-specific) for 1,000 rules of every shape the index knows."""
    actions = ["ALLOW", "DENY", "ASK"]
    specs = [("read-*", "ALLOW", False)]
    specs += [(f"tool-{i:04d}", actions[i % 3], False) for i in range(400)]
    specs += [(f"team-{i:03d}-*", actions[i % 3], False) for i in range(300)]
    specs += [(f"svc{i:03d}-?-deploy*", actions[i % 3], False) for i in range(150)]
    specs += [(f"*-job-{i:03d}", actions[i % 3], False) for i in range(49)]
    specs += [(f"rt-{i:03d}*", actions[i % 3], True) for i in range(100)]
    assert len(specs) == RULES
    return specs


def seed() -> None:
    """Runtime, token, operator, 1,000 rules and the granted sessions; prints the token."""
    _django()
    from django.db import transaction

    from aimon_admin.accounts.roles import Role
    from aimon_admin.accounts.services import user_create
    from aimon_admin.approvals.choices import Answer
    from aimon_admin.approvals.rules import rule_create
    from aimon_admin.approvals.services import RequestInput, request_answer, request_create
    from aimon_admin.core.actors import Actor
    from aimon_admin.runtimes.services import runtime_create, token_issue

    actor = Actor.system("benchmark")
    operator = user_create(username="bench-operator", password=None, roles=[Role.OPERATOR], actor=actor)
    runtime = runtime_create(name="bench", actor=actor)
    _, token = token_issue(runtime=runtime, actor=actor, label="benchmark")
    with transaction.atomic():
        for pattern, action, own in rule_specs():
            rule_create(pattern=pattern, action=action, actor=actor, runtime=runtime if own else None)
    for session_id, skill in (("s-bench", "deploy-prod"), ("s-parent", "notify-team")):
        request, _ = request_create(
            RequestInput(runtime=runtime, skills=[skill], session_id=session_id, principal=operator.username)
        )
        request_answer(request=request, user=operator, answer=Answer.ALLOW_SESSION)
    print(json.dumps({"token": token}))


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def chain() -> None:
    """Time the chain in process; prints the figures as JSON."""
    _django()
    from aimon_admin.approvals import policy, rules, services
    from aimon_admin.approvals.choices import GrantDecision, GrantScope, RuleAction
    from aimon_admin.approvals.models import Session, SkillRule
    from aimon_admin.runtimes.models import AgentRuntime

    runtime = AgentRuntime.objects.get(name="bench")
    session = Session.objects.get(runtime=runtime, session_id="s-bench")
    invoking = Session.objects.get(runtime=runtime, session_id="s-parent")
    index = rules.rule_index()
    held = {
        "deploy-prod": policy.Layers(session=GrantDecision.ALLOW),
        "notify-team": policy.Layers(invoking_session=GrantDecision.ALLOW),
        "read-file": policy.Layers(),
    }

    def evaluate(skills: dict[str, policy.Layers]) -> None:
        for skill, layers in skills.items():
            rule = index.find(runtime.pk, skill)  # the search itself, not the remembered answer
            policy.chain_decide(
                policy.Layers(
                    turn=layers.turn,
                    session=layers.session,
                    invoking_session=layers.invoking_session,
                    agent=layers.agent,
                    rule=rule.action if rule else None,
                )
            )

    def pure() -> None:
        evaluate(held)

    worst = {"x" * 200: policy.Layers()}  # no rule matches: every prefix bucket is tried

    def miss() -> None:
        evaluate(worst)

    def whole() -> None:
        services.skills_decide(
            runtime=runtime, skills=SKILLS, session=session, invoking_session=invoking, turn_id="t-1"
        )

    verdicts = services.skills_decide(
        runtime=runtime, skills=SKILLS, session=session, invoking_session=invoking, turn_id="t-1"
    )
    assert [(v.decision, v.source) for v in verdicts] == [
        ("ALLOW", "SESSION"),
        ("ALLOW", "INVOKING_SESSION"),
        ("ALLOW", "RULE"),
    ], verdicts
    figures: dict[str, object] = {}
    cases = (("pure", pure, 5000), ("miss", miss, 5000), ("skills_decide", whole, 1000))
    for name, call, rounds in cases:
        for _ in range(200):
            call()
        # On a shared machine one preemption is several ms, which is what a p99 of single
        # calls would report: trials, so the least and the typically disturbed show.
        trials = []
        for _ in range(TRIALS):
            samples = []
            for _ in range(rounds):
                started = time.perf_counter_ns()
                call()
                samples.append((time.perf_counter_ns() - started) / 1e6)
            trials.append(
                {"p50": percentile(samples, 50), "p99": percentile(samples, 99), "max": max(samples)}
            )
        trials.sort(key=lambda t: t["p99"])
        figures[name] = {"n": rounds, "best": trials[0], "median": trials[len(trials) // 2]}
    specs = [
        policy.RuleSpec(r.pk, r.runtime_id, r.pattern, RuleAction(r.action), GrantScope(r.widest_scope))
        for r in SkillRule.objects.all()
    ]
    started = time.perf_counter()
    policy.RuleIndex(specs)
    figures["index_build_ms"] = (time.perf_counter() - started) * 1000
    figures["rules_indexed"] = len(specs)
    print(json.dumps(figures))


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


WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer %s"
wrk.headers["Content-Type"] = "application/json"
wrk.body = %s
local bad = 0
response = function(status, headers, body)
  if status ~= 200 then bad = bad + 1 end
end
done = function(summary, latency, requests)
  io.write(string.format("non200=%%d\\n", bad))
end
"""


def run_wrk(port: int, path: str, token: str, body: str, seconds: int, connections: int) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(WRK_SCRIPT % (token, json.dumps(body)))
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
    bad = re.search(r"non200=(\d+)", out)
    if bad and int(bad.group(1)):
        raise SystemExit(f"{path}: {bad.group(1)} responses were not 200\n{out}")
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if found is None:
        raise SystemExit(f"unexpected wrk output:\n{out}")
    return float(found.group(1))


def run_python(port: int, path: str, token: str, body: str, seconds: int, connections: int) -> float:
    """Without wrk: one keep-alive connection per thread, a bounded loop of `seconds`."""
    counts = [0] * connections
    deadline = time.monotonic() + seconds

    def worker(slot: int) -> None:
        conn = HTTPConnection("127.0.0.1", port, timeout=10)
        while time.monotonic() < deadline:
            conn.request("POST", path, body=body, headers=headers(token))
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise SystemExit(f"{path}: HTTP {response.status}")
            counts[slot] += 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(connections)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.monotonic() - started)


def check_answer(port: int, token: str, body: str) -> None:
    conn = HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/api/v1/skill-decisions", body=body, headers=headers(token))
    response = conn.getresponse()
    got = json.loads(response.read())
    expected = [["ALLOW", "SESSION"], ["ALLOW", "INVOKING_SESSION"], ["ALLOW", "RULE"]]
    if response.status != 200 or [[d["decision"], d["source"]] for d in got["decisions"]] != expected:
        raise SystemExit(f"unexpected answer: {response.status} {got}")


def measure(label: str, database_url: str, args: argparse.Namespace) -> bool:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="benchmarks.settings",
        DATABASE_URL=database_url,
        DATABASE_CONN_MAX_AGE=str(args.conn_max_age),
        PYTHONPATH=str(ROOT),
    )
    env.pop("REDIS_URL", None)
    subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)

    def child(flag: str) -> dict:
        out = subprocess.run(
            [PYTHON, __file__, flag], cwd=ROOT, env=env, check=True, capture_output=True, text=True
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    token = child("--seed")["token"]
    figures = child("--chain")
    ok = True
    print(f"{label}: chain evaluation in process, {figures['rules_indexed']:,} rules")
    for name, what in (
        ("pure", "rule lookups + chain_decide, 3 skills"),
        ("miss", "rule lookup + chain_decide, one 200-char skill no rule matches (worst case)"),
        ("skills_decide", "skills_decide, 3 skills, with its queries"),
    ):
        f = figures[name]
        best, median = f["best"], f["median"]
        print(
            f"    {what}: p50 {median['p50']:.3f} ms, p99 {best['p99']:.3f} ms best trial / "
            f"{median['p99']:.3f} ms median trial, max {median['max']:.3f} ms "
            f"({TRIALS} trials of {f['n']:,}; target p99 ≤ {TARGET_P99_MS} ms)"
        )
    ok &= figures["pure"]["best"]["p99"] <= TARGET_P99_MS
    if args.chain_only:
        return ok
    print(f"    building the index of every rule: {figures['index_build_ms']:.1f} ms (once per rule change)")

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
    body = json.dumps(BODY)
    try:
        wait_until_up(port, token)
        check_answer(port, token, body)
        for path in ("/bench/baseline", "/api/v1/skill-decisions"):
            run(port, path, token, body, 2, args.connections)  # warm-up
        base, real = [], []
        for _ in range(args.rounds):
            base.append(run(port, "/bench/baseline", token, body, args.seconds, args.connections))
            real.append(run(port, "/api/v1/skill-decisions", token, body, args.seconds, args.connections))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    b, r = statistics.median(base), statistics.median(real)
    client = "wrk" if run is run_wrk else "python threads"
    print(
        f"    throughput: baseline {b:,.0f} req/s, skill-decisions {r:,.0f} req/s, ratio {r / b:.2f} "
        f"(target ≥ {TARGET_RATIO:.2f}; median of {args.rounds} x {args.seconds}s rounds, {client}, "
        f"{args.connections} connections, {args.workers} uvicorn worker(s), CONN_MAX_AGE={args.conn_max_age})"
    )
    print(f"    baseline rounds: {', '.join(f'{x:,.0f}' for x in base)}")
    print(f"    decision rounds: {', '.join(f'{x:,.0f}' for x in real)}")
    return ok and r / b >= TARGET_RATIO


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="postgres")
    parser.add_argument("--seconds", type=int, default=10, help="length of each measured round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    # 0, as the product runs under ASGI: each request's sync code runs in a thread of its
    # own, so a kept connection is never reused, only left open (on a shared PostgreSQL,
    # until "too many clients").
    parser.add_argument("--conn-max-age", type=int, default=0, help="DATABASE_CONN_MAX_AGE for the server")
    parser.add_argument("--python-client", action="store_true", help="use threads even if wrk is installed")
    parser.add_argument("--chain-only", action="store_true", help="skip the HTTP throughput rounds")
    parser.add_argument("--seed", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--chain", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seed:
        seed()
        return 0
    if args.chain:
        chain()
        return 0

    results = []
    if args.db in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="aimon_bench_approvals_") as folder:
            results.append(measure("SQLite", f"sqlite:///{folder}/bench.sqlite3", args))
    if args.db in ("postgres", "both"):
        base_url = os.environ.get("DATABASE_URL") or DEFAULT_PG
        if not base_url.startswith(("postgres://", "postgresql://")):
            base_url = DEFAULT_PG
        pg_admin(base_url, f"DROP DATABASE IF EXISTS {BENCH_DB}")
        pg_admin(base_url, f"CREATE DATABASE {BENCH_DB}")
        try:
            results.append(measure("PostgreSQL", pg_url_for(base_url, BENCH_DB), args))
        finally:
            pg_admin(base_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
