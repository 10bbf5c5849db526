"""Open-model load on the decision endpoints: the sustainable rate, p99 at half of it, and
the ratio against the bare baseline, every response checked.

Run by hand (never by CI), from the project root, with PostgreSQL and Redis up:

    .venv/bin/python benchmarks/load.py                       # the figures (about 10 minutes)
    .venv/bin/python benchmarks/load.py --quick               # one short ladder, to try it
    .venv/bin/python benchmarks/load.py --topology            # make prod's topology (nginx in front)
    .venv/bin/python benchmarks/load.py --workers 3 --http h11 --loop asyncio
    .venv/bin/python benchmarks/load.py --profile 150         # sampling profiler, one worker
    .venv/bin/python benchmarks/load.py --profile 60 --yappi  # yappi's CPU clock, one worker
    .venv/bin/python benchmarks/load.py --start 250 --seconds 6 --repeats 6 \
        --compare-root /tmp/scratch --compare-env NAME=1      # A/B against a scratch copy
    .venv/bin/python benchmarks/load.py --topology --kind tool --compare-root /tmp/before  # one kind
    .venv/bin/python benchmarks/load_client.py --self-test    # the checker catches errors

Why this generator: wrk (and wrk + Lua) is closed-loop, each connection sends its next
request when the last one returns, so a slow server lowers the offered rate and hides its
own latency (coordinated omission); wrk2 is not packaged. locust's users are closed loops
too (a wait time after each response) and its gevent client costs several times the CPU
per request, CPU the server needs on 2 cores. So benchmarks/load_client.py: asyncio (uvloop)
over raw HTTP/1.1 keep-alive connections, in `--procs` processes of their own, sending on a
schedule fixed in advance (Poisson by default, `--even` for evenly spaced); latency runs
from each request's scheduled time, so queueing for a connection or behind the server
counts.

State is throwaway: a PostgreSQL database `aimon_bench_load` (`LOAD_DATABASE` names another;
created and dropped here, never anyone else's) and Redis database 11 (`LOAD_REDIS_URL` names
another; flushed at the start, only it). Seeded: 1,000
skill rules (benchmarks/skill_decisions.rule_specs), an operator, three runtimes (ceiling
MUTATING with the default gate, one exempt at MUTATING, one with a READ_ONLY ceiling) with
300 local tools each, an IGNORE and a TRUST MCP server with 50 tools each, and answers
that hold for a turn, a session (an allow, and a deny under an allowing rule) and the
agent. The mix (benchmarks/load_mix.py) has 24 skill bodies and 25 tool bodies, sent in
turn: every decision source of the chain and every gate reason, attended and unattended,
each with the exact answer S2-S3 and T5-T11 give, written out there by hand, not
computed by our code. (The decisions only read: nothing grows during a run but the
sessions' last-seen time and the tokens' last-used time.)

The server is started as production runs it: uvicorn with `--workers`, benchmarks.settings
(the product's settings, DEBUG off, plus `/bench/baseline`), PostgreSQL with its pool,
Redis, no access log. Then, per repeat, a ladder of offered rates for the decisions and the
baseline in turn at each step; a rate is sustained when every request sent is answered,
200 with the expected body, at 97% or more of the schedule's rate, and p99 ≤ `--p99-limit`.
The figures are medians over repeats: (a) the highest sustained decision rate; (b) p99 at
half of it, in its own longer runs; (c) the ratio of (a) to the baseline's highest
sustained rate, and of server CPU seconds per request at the same offered rate (steadier
than the rates on a shared machine). The generator's CPU and the machine's
are reported at each step: on 2 cores they compete with the server.

Measured 2026-11-30 on the 2-core development machine while other sessions ran their test
suites on it (the machine was 1.9-2.0 cores busy through nearly every step, our server
getting 0.5-1.1 of them), so the wall-clock figures are those of a shared machine, and the
CPU-time ones are what to read:

* `.venv/bin/python benchmarks/load.py --at-target --p99-limit 200` (2 workers, uvloop +
  httptools, 3 repeats), run twice: (a) sustained decisions/s, median 0 (repeats 0, 0,
  169) and 144 (169, 144, 0); baseline 169 (0, 169, 222) and 0 (169, 0, 0), so no ratio
  of rates: at 150/s the p99 swung between 38 and 440 ms with the load of others' tests.
  (b) p99 at half: 70 ms, then 151 / 200 ms. At 500/s offered the server answered
  234-359/s with p50 4-12 s: overloaded, while it got only 1.0-1.2 of the 2 cores.
  Targets (≥ 1,000/s; p99 ≤ 10 ms at half) missed, see the CPU figures for why.
* Server CPU per request, baseline / decisions, same run, same rates: 0.88 (repeats 0.85,
  0.90, 0.88), then 0.90 (0.90, 0.90, 0.96); in quieter runs (`--repeats 3 --start 300
  --stop 300 --seconds 8 --half-seconds 0`): 0.89-0.90. A decision costs 11-14% more
  server CPU than the bare endpoint: the ≥ 0.80 ratio holds in CPU terms.
* What a decision costs the machine (quietest run, machine ~1.1 cores busy, 300/s): server
  2.68 ms + PostgreSQL 0.55 ms + generator 0.17 ms = 3.40 ms of CPU, so 2 idle cores carry
  at most ~590 decisions/s; the baseline 2.80 ms, ~715/s. 1,000/s on 2 cores needs about
  2 ms of CPU per request all told: the bare Django endpoint does not reach it either.
* Zero wrong decisions and zero 5xx in every step of every run (more than 200,000 checked
  responses).
* uvloop + httptools against asyncio + h11 (`--loop asyncio --http h11`, 2 workers, 300/s,
  3 repeats): server CPU per decision 2.87 against 3.07 ms, per baseline 2.62 against 2.83
  ms (about 7% less): pinned as `uvicorn[standard]` in requirements.txt.
* Workers (`--workers 1..4`, same command): one worker is GIL-bound at ~0.85 core, ~300-350
  requests/s; 3 or 4 workers buy no CPU (4: ~5% more per request); 2 (= cores) is the choice.
* Generator: 0.03-0.05 cores at 150-500/s (~0.17 ms per request; the self-test offers
  2,000/s from one process on 0.17 cores). With the machine saturated by others its
  dispatcher ran late (p99 4-14 ms, 150 ms at 500/s): latency counts from the schedule,
  so that lateness is inside the figures, never hidden.

What limits it, measured (`--profile 60 --yappi`, a one-worker server under yappi's CPU
clock; `--profile 150` for the wall-clock sampler): the Bearer token lookup,
`runtimes.selectors.token_authenticate`, holds 56% of the request's CPU (the ORM building
and compiling a select_related query with `.first()`'s ORDER BY on every request:
`SQLCompiler.as_sql` 29%, `get_order_by` 11%), against 4% for the skill decision itself; the
pool's per-borrow health check (`CONN_HEALTH_CHECKS` with psycopg-pool) is a round trip on
every request (42-55% of a request thread's busy wall-clock samples); asgiref's five thread
hops per request ~12%. A/B against a scratch copy, interleaved in one run (`--compare-root
/tmp/scratch --compare-env NAME=1`, 6 pairs at 250/s; an identical copy measures 0.99):
the token lookup in plain SQL 0.68 of the server CPU per decision (pairs 0.63-0.79); no
health check per borrow 0.91 (0.79-1.16, within noise); both 0.76 (0.70-0.80);
`gc.freeze()` + a gen-0 threshold of 10,000 0.97 (noise); the identical copy 0.92-1.10.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from http.client import HTTPConnection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import load_mix  # noqa: E402

PYTHON = sys.executable
BENCH_DB = os.environ.get("LOAD_DATABASE", "aimon_bench_load")  # another name: beside someone else's run
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS = "redis://127.0.0.1:6379/11"
# The decision targets: sustained with p99 ≤ `--p99-limit`; p99 at half of it (`--at-target`);
# sustained against the bare endpoint's sustained.
TARGET_RATE = 2000
TARGET_P99_MS = 5.0
TARGET_RATIO = 0.85


# --- Machine accounting ------------------------------------------------------------------------


def session_cpu_seconds(session: int) -> float:
    """User + system CPU of every live process in a session (the server and its workers)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def database_cpu_seconds(name: str) -> float:
    """CPU of the PostgreSQL backends serving database `name` (their title names it)."""
    total = 0
    marker = f" {name} ".encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker not in (proc / "cmdline").read_bytes().replace(b"\0", b" "):
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    values = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def percentile(ordered: list[float], p: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# --- One step: a fixed offered rate for a fixed time ------------------------------------------------


@dataclass
class Step:
    path: str
    offered: float
    seconds: float
    achieved: float
    p50: float
    p90: float
    p99: float
    max: float
    responses: int
    sent: int
    errors: int  # non-200 and no response at all
    server_errors: int  # 5xx
    wrong: int
    server_cpu_per_request_ms: float
    db_cpu_per_request_ms: float  # PostgreSQL's backends for the benchmark database
    server_cpu: float  # cores used by the server's processes
    generator_cpu: float  # cores used by the generator's processes
    machine_cpu: float  # cores busy on the whole machine
    lag_p99_ms: float
    samples: list[str]

    def cpu_per_request_ms(self) -> float:
        """Server, database and generator CPU per response: what a request costs the machine."""
        generator = self.generator_cpu / max(1.0, self.achieved) * 1000
        return self.server_cpu_per_request_ms + self.db_cpu_per_request_ms + generator

    def sustained(self, limit: float) -> bool:
        return (
            # Against what was sent: a Poisson schedule sends a few percent more or less than
            # the nominal rate in a few seconds.
            self.errors == 0
            and self.wrong == 0
            and self.responses == self.sent
            and self.achieved >= 0.97 * self.sent / self.seconds
            and self.p99 <= limit
        )

    def line(self) -> str:
        name = "baseline " if self.path == "/bench/baseline" else "decisions"
        return (
            f"  {name} offered {self.offered:7,.0f}/s achieved {self.achieved:7,.0f}/s  "
            f"p50 {self.p50:6.2f} p90 {self.p90:6.2f} p99 {self.p99:7.2f} max {self.max:7.1f} ms  "
            f"err {self.errors} 5xx {self.server_errors} wrong {self.wrong}  "
            f"cpu: server {self.server_cpu:.2f} gen {self.generator_cpu:.2f} machine {self.machine_cpu:.2f} "
            f"(gen late p99 {self.lag_p99_ms:.1f} ms) "
            f"(CPU/request: server {self.server_cpu_per_request_ms:.2f} ms, "
            f"PostgreSQL {self.db_cpu_per_request_ms:.2f} ms)"
        )


def run_step(
    args: argparse.Namespace, port: int, server_session: int, cases: list[dict], rate: float, seconds: float
) -> Step:
    procs = max(1, min(args.procs, int(rate // 300) + 1))
    start_at = time.monotonic() + 1.5  # every generator process warmed and waiting
    children = []
    reports = []
    for n in range(procs):
        # Each generator writes its report to a file of its own: a report read over a pipe
        # came back cut at the pipe's 64 KiB once (a 20 s step at 1,000/s).
        handle, report = tempfile.mkstemp(prefix="aimon_load_report_", suffix=".json")
        os.close(handle)
        reports.append(Path(report))
        job = {
            "host": "127.0.0.1",
            "port": port,
            "cases": cases[n::procs] or cases,
            "rate": rate / procs,
            "seconds": seconds,
            "start_at": start_at,
            "seed": n * 7919 + int(rate),
            "poisson": not args.even,
            "connections": args.connections,
            "max_connections": args.max_connections,
            "timeout": 10.0,
            "report": report,
        }
        child = subprocess.Popen(
            [PYTHON, str(ROOT / "benchmarks" / "load_client.py")], stdin=subprocess.PIPE, text=True
        )
        child.stdin.write(json.dumps(job))
        child.stdin.close()
        children.append(child)
    time.sleep(max(0.0, start_at - time.monotonic()))
    cpu0, (busy0, total0) = session_cpu_seconds(server_session), machine_busy()
    db0 = database_cpu_seconds(BENCH_DB)
    for child in children:
        if child.wait() != 0:
            raise SystemExit(f"a load generator failed (exit status {child.returncode})")
    outs = [json.loads(path.read_text()) for path in reports]
    for path in reports:
        path.unlink()
    cpu1, (busy1, total1) = session_cpu_seconds(server_session), machine_busy()
    db1 = database_cpu_seconds(BENCH_DB)
    elapsed = max(out["elapsed"] for out in outs)
    latencies = sorted(x for out in outs for x in out["latencies"])
    statuses: dict[int, int] = {}
    for out in outs:
        for code, count in out["statuses"].items():
            statuses[int(code)] = statuses.get(int(code), 0) + count
    ok = statuses.get(200, 0)
    failures = sum(out["failures"] for out in outs)
    cores = os.cpu_count() or 1
    used = cpu1 - cpu0
    return Step(
        path=cases[0]["path"],
        offered=rate,
        seconds=seconds,
        achieved=len(latencies) / elapsed,
        p50=percentile(latencies, 50),
        p90=percentile(latencies, 90),
        p99=percentile(latencies, 99),
        max=latencies[-1] if latencies else float("nan"),
        responses=len(latencies),
        sent=sum(out["sent"] for out in outs),
        errors=len(latencies) - ok + failures,
        server_errors=sum(v for k, v in statuses.items() if k >= 500),
        wrong=sum(out["wrong"] for out in outs),
        server_cpu_per_request_ms=used / max(1, len(latencies)) * 1000,
        db_cpu_per_request_ms=(db1 - db0) / max(1, len(latencies)) * 1000,
        server_cpu=used / elapsed,
        generator_cpu=sum(out["cpu_seconds"] for out in outs) / elapsed,
        machine_cpu=(busy1 - busy0) / max(1, total1 - total0) * cores,
        lag_p99_ms=max(out["lag_p99_ms"] for out in outs),
        samples=[s for out in outs for s in out["samples"]][:5],
    )


# --- The server ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pg_admin(base_url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(base_url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        conn.execute(sql)


def pg_url_for(base_url: str, name: str) -> str:
    parts = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def server_env(database_url: str, redis_url: str) -> dict[str, str]:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="benchmarks.settings",
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        PYTHONPATH=str(ROOT),
    )
    for name in ("DJANGO_DEBUG", "CELERY_TASK_ALWAYS_EAGER", "DATABASE_CONN_MAX_AGE"):
        env.pop(name, None)
    return env


def server_label(args: argparse.Namespace) -> str:
    if args.topology:
        return f"make prod's topology: nginx, granian {args.workers}x{args.threads} (WSGI), uvicorn (ASGI)"
    return f"uvicorn {args.workers} worker(s) --loop {args.loop} --http {args.http}"


def start_server(
    args: argparse.Namespace, env: dict[str, str], port: int, root: Path = ROOT, *, other: bool = False
) -> subprocess.Popen:
    if args.topology:
        workers = (args.compare_workers if other else None) or args.workers
        threads = (args.compare_threads if other else None) or args.threads
        command = [PYTHON, str(ROOT / "benchmarks" / "topology.py"), "--port", str(port)]
        command += ["--workers", str(workers), "--threads", str(threads)]
    elif args.profile:
        command = [PYTHON, str(ROOT / "benchmarks" / "load_profile.py"), "--port", str(port)]
        command += ["--loop", args.loop, "--http", args.http, "--out", args.profile_out]
        command += ["--yappi"] if args.yappi else []
    else:
        command = [PYTHON, "-m", "uvicorn", "aimon_admin.asgi:application", "--host", "127.0.0.1"]
        command += ["--port", str(port), "--workers", str(args.workers), "--loop", args.loop]
        command += ["--http", args.http, "--lifespan", "off", "--no-access-log", "--log-level", "warning"]
    return subprocess.Popen(command, cwd=root, env=env, start_new_session=True)


def wait_until_up(port: int, token: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("POST", "/bench/baseline", body="{}", headers={"Authorization": f"Bearer {token}"})
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("uvicorn did not come up")


def check_every_case(port: int, cases: list[dict]) -> None:
    """Each body once, before any load: a wrong expectation fails here, readably."""
    conn = HTTPConnection("127.0.0.1", port, timeout=10)
    for case in cases:
        conn.request(
            "POST",
            case["path"],
            body=case["body"],
            headers={"Authorization": f"Bearer {case['token']}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        raw = response.read()
        got = json.loads(raw) if response.status == 200 else raw
        if response.status != 200 or got != case["expected"]:
            raise SystemExit(
                f"{case['path']} {case['body']}: HTTP {response.status} {got!r}, "
                f"expected {case['expected']!r}"
            )


# --- The figures ---------------------------------------------------------------------------------


def ladder(args: argparse.Namespace) -> list[float]:
    rates, rate = [], float(args.start)
    while rate <= args.stop:
        rates.append(round(rate, -1))
        rate *= args.factor
    return rates


@dataclass
class Figures:
    best_decisions: list[float]
    best_baseline: list[float]
    cpu_ratio: list[float]
    half_p99: list[float]
    target_p99: list[float]
    bad: int
    costs: dict[str, list[float]]


def drain(session: int, limit: float = 60.0) -> None:
    """Wait until the server is idle (under a tenth of a core for a second): an overloaded step
    leaves requests queued behind nginx, which the next repeat's first step would meet."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = session_cpu_seconds(session)
        time.sleep(1.0)
        if session_cpu_seconds(session) - before < 0.1:
            return


def measure(
    args: argparse.Namespace, port: int, session: int, decisions: list[dict], baseline: list[dict]
) -> Figures:
    """Per repeat: the ladder, decisions and baseline in turn at each rate, each stopped
    after its first unsustained step; then p99 at half the decisions' best."""
    best_decisions, best_baseline, cpu_ratio, half_p99, target_p99, bad = [], [], [], [], [], 0
    costs: dict[str, list[float]] = {"decisions": [], "baseline": []}
    for repeat in range(args.repeats):
        print(f"repeat {repeat + 1}/{args.repeats}: ladder of {args.seconds}s steps", flush=True)
        best = {"decisions": 0.0, "baseline": 0.0}
        going = {"decisions": True, "baseline": not args.no_baseline}
        ratios = []
        for rate in ladder(args):
            pair = {}
            for name, cases in (("decisions", decisions), ("baseline", baseline)):
                if not going[name]:
                    continue
                step = run_step(args, port, session, cases, rate, args.seconds)
                print(step.line(), flush=True)
                for sample in step.samples:
                    print(f"      {sample}")
                bad += step.wrong + step.server_errors
                pair[name] = step
                costs[name].append(step.cpu_per_request_ms())
                if step.sustained(args.p99_limit):
                    best[name] = step.achieved
                else:
                    going[name] = False
            if "decisions" in pair and "baseline" in pair:
                ratios.append(
                    pair["baseline"].server_cpu_per_request_ms / pair["decisions"].server_cpu_per_request_ms
                )
            if not any(going.values()):
                break
        best_decisions.append(best["decisions"])
        best_baseline.append(best["baseline"])
        if ratios:
            cpu_ratio.append(statistics.median(ratios))
        half = round(best["decisions"] / 2, -1)
        if half and args.half_seconds:
            step = run_step(args, port, session, decisions, half, args.half_seconds)
            print(f"  half of {best['decisions']:,.0f}/s, {args.half_seconds}s:")
            print(step.line(), flush=True)
            bad += step.wrong + step.server_errors
            half_p99.append(step.p99)
        if args.at_target:
            step = run_step(args, port, session, decisions, TARGET_RATE / 2, args.half_seconds)
            print(f"  at {TARGET_RATE // 2}/s (half the {TARGET_RATE:,}/s target), {args.half_seconds}s:")
            print(step.line(), flush=True)
            bad += step.wrong + step.server_errors
            target_p99.append(step.p99)
            if not step.sustained(args.p99_limit):
                drain(session)
    return Figures(best_decisions, best_baseline, cpu_ratio, half_p99, target_p99, bad, costs)


def compare(args: argparse.Namespace, a: tuple[int, int], b: tuple[int, int], decisions: list[dict]) -> int:
    """A/B: the same decision load on two servers in turn (ABBA order), at `--start` req/s."""
    steps: dict[str, list[Step]] = {"A": [], "B": []}
    for repeat in range(args.repeats):
        order = ("A", "B") if repeat % 2 == 0 else ("B", "A")
        for name in order:
            port, session = a if name == "A" else b
            step = run_step(args, port, session, decisions, args.start, args.seconds)
            print(f"{name}{step.line()}", flush=True)
            steps[name].append(step)
    ratios = [
        sb.server_cpu_per_request_ms / sa.server_cpu_per_request_ms
        for sa, sb in zip(steps["A"], steps["B"], strict=True)
    ]
    b_label = " ".join(
        [
            *(["root " + str(args.compare_root)] if args.compare_root else []),
            *args.compare_env,
            *(
                [f"granian {args.compare_workers or args.workers}x{args.compare_threads or args.threads}"]
                if args.compare_workers or args.compare_threads
                else []
            ),
        ]
    )
    print(f"\nA: {ROOT}; B: {b_label}; {args.repeats} x {args.seconds}s at {args.start:,.0f}/s each")
    for name, runs in steps.items():
        cpu = statistics.median(s.server_cpu_per_request_ms for s in runs)
        db = statistics.median(s.db_cpu_per_request_ms for s in runs)
        p50, p99 = statistics.median(s.p50 for s in runs), statistics.median(s.p99 for s in runs)
        print(
            f"  {name}: server CPU/request {cpu:.2f} ms, PostgreSQL {db:.2f} ms, "
            f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"
        )
    each = ", ".join(f"{r:.2f}" for r in ratios)
    print(f"  B / A server CPU per request: {statistics.median(ratios):.2f} ({each})")
    bad = sum(s.wrong + s.server_errors for runs in steps.values() for s in runs)
    print(f"  wrong decisions + 5xx: {bad}")
    return 0 if bad == 0 else 1


def report(args: argparse.Namespace, figures: Figures) -> bool:
    best_decisions, best_baseline, cpu_ratio = (
        figures.best_decisions,
        figures.best_baseline,
        figures.cpu_ratio,
    )
    half_p99, bad, costs = figures.half_p99, figures.bad, figures.costs
    d = statistics.median(best_decisions)
    print(
        f"\nPostgreSQL + Redis, {server_label(args)}, "
        f"{args.procs} generator process(es), {'even' if args.even else 'Poisson'} arrivals, "
        f"p99 limit {args.p99_limit} ms, median of {args.repeats}:"
    )
    print(
        f"  (a) sustained decisions/s: {d:,.0f} (repeats {', '.join(f'{x:,.0f}' for x in best_decisions)}; "
        f"target ≥ {TARGET_RATE:,})"
    )
    ok = d >= TARGET_RATE and bad == 0
    if half_p99:
        h = statistics.median(half_p99)
        print(f"  (b) p99 at half that rate: {h:.2f} ms (repeats {', '.join(f'{x:.2f}' for x in half_p99)})")
    if figures.target_p99:
        t = statistics.median(figures.target_p99)
        print(
            f"  (d) p99 at {TARGET_RATE // 2:,}/s: {t:.2f} ms "
            f"(repeats {', '.join(f'{x:.2f}' for x in figures.target_p99)}; target ≤ {TARGET_P99_MS} ms)"
        )
        ok &= t <= TARGET_P99_MS
    if not args.no_baseline:
        b = statistics.median(best_baseline)
        ratio = d / b if b else float("nan")  # nothing sustained: no ratio
        repeats = ", ".join(f"{x:,.0f}" for x in best_baseline)
        print(
            f"  (c) baseline sustained/s: {b:,.0f} (repeats {repeats}); "
            f"ratio {ratio:.2f} (target ≥ {TARGET_RATIO:.2f})"
        )
        if cpu_ratio:
            print(
                f"      server CPU per request, baseline / decisions at the same rates: "
                f"{statistics.median(cpu_ratio):.2f} (repeats {', '.join(f'{x:.2f}' for x in cpu_ratio)})"
            )
        ok &= ratio >= TARGET_RATIO
    cores = os.cpu_count() or 1
    for name, values in costs.items():
        if values:
            cost = statistics.median(values)
            print(
                f"  CPU per {name} request (server + PostgreSQL + generator), median of every step: "
                f"{cost:.2f} ms, so {cores} cores with nothing else running carry at most "
                f"{cores * 1000 / cost:,.0f}/s"
            )
    print(f"  wrong decisions + 5xx over every step: {bad} (target 0)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers (granian's with --topology)")
    parser.add_argument(
        "--topology",
        action="store_true",
        help="make prod's: nginx, granian (WSGI) and uvicorn (benchmarks/topology.py)",
    )
    parser.add_argument("--threads", type=int, default=2, help="with --topology: threads per granian worker")
    parser.add_argument("--loop", choices=["uvloop", "asyncio", "auto"], default="uvloop")
    parser.add_argument("--http", choices=["httptools", "h11", "auto"], default="httptools")
    parser.add_argument("--procs", type=int, default=2, help="generator processes (at most)")
    parser.add_argument("--connections", type=int, default=16, help="warm connections per generator process")
    parser.add_argument("--max-connections", type=int, default=64, help="per generator process")
    parser.add_argument("--start", type=float, default=150, help="first offered rate of the ladder, req/s")
    parser.add_argument("--stop", type=float, default=4000)
    parser.add_argument("--factor", type=float, default=1.15, help="each step's rate over the last's")
    parser.add_argument("--seconds", type=float, default=8, help="length of each ladder step")
    parser.add_argument("--half-seconds", type=float, default=20, help="length of the half-rate run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--p99-limit", type=float, default=50.0, help="ms; above it a rate is not sustained")
    parser.add_argument("--even", action="store_true", help="evenly spaced arrivals instead of Poisson")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument(
        "--kind", choices=("skill", "tool"), help="only the skill or only the tool decisions of the mix"
    )
    parser.add_argument("--at-target", action="store_true", help=f"also run at {TARGET_RATE // 2}/s")
    parser.add_argument("--quick", action="store_true", help="one repeat of 4s steps, 8s at half")
    parser.add_argument(
        "--profile", type=float, default=0, help="instead: yappi in a 1-worker server at this rate"
    )
    parser.add_argument("--profile-out", default=str(Path(tempfile.gettempdir()) / "aimon_load_profile.txt"))
    parser.add_argument("--yappi", action="store_true", help="with --profile: yappi's CPU clock too")
    parser.add_argument(
        "--compare-root", help="A/B instead: a second server from this checkout (a scratch copy)"
    )
    parser.add_argument(
        "--compare-env", action="append", default=[], metavar="NAME=VALUE", help="A/B: B's environment"
    )
    parser.add_argument("--compare-workers", type=int, help="A/B with --topology: B's granian workers")
    parser.add_argument("--compare-threads", type=int, help="A/B with --topology: B's threads per worker")
    parser.add_argument("--seed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # A SIGTERM stops the servers and drops the database too (the `finally` below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.seed:
        print(json.dumps(load_mix.seed()))
        return 0
    if args.quick:
        args.repeats, args.seconds, args.half_seconds = 1, 4, 8

    base_url = os.environ.get("DATABASE_URL") or DEFAULT_PG
    if not base_url.startswith(("postgres://", "postgresql://")):
        base_url = DEFAULT_PG
    redis_url = os.environ.get("LOAD_REDIS_URL", DEFAULT_REDIS)
    pg_admin(base_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    pg_admin(base_url, f"CREATE DATABASE {BENCH_DB}")
    env = server_env(pg_url_for(base_url, BENCH_DB), redis_url)
    server = None
    try:
        import redis

        redis.Redis.from_url(redis_url).flushdb()
        subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
        seeded = json.loads(
            subprocess.run(
                [PYTHON, __file__, "--seed"], cwd=ROOT, env=env, check=True, capture_output=True, text=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        decisions = [
            case
            for case in load_mix.decision_cases(seeded)
            if args.kind is None or case["path"] == f"/api/v1/{args.kind}-decisions"
        ]
        baseline = load_mix.baseline_cases(seeded)
        port = free_port()
        server = start_server(args, env, port)
        wait_until_up(port, seeded["tokens"]["bench"])
        check_every_case(port, decisions + baseline)
        print(
            f"{len(decisions)} decision bodies and the baseline answered as expected; warming up", flush=True
        )
        for cases in (decisions, baseline):
            run_step(args, port, server.pid, cases, args.start, 3)
        if args.profile:
            step = run_step(args, port, server.pid, decisions, args.profile, 20)
            print(step.line())
            for sample in step.samples:
                print(f"      {sample}")
            return 0
        if args.compare_root or args.compare_env or args.compare_workers or args.compare_threads:
            root = Path(args.compare_root or ROOT).resolve()
            other_env = dict(env, PYTHONPATH=str(root))
            other_env.update(pair.split("=", 1) for pair in args.compare_env)
            other_port = free_port()
            other = start_server(args, other_env, other_port, root, other=True)
            try:
                wait_until_up(other_port, seeded["tokens"]["bench"])
                check_every_case(other_port, decisions + baseline)
                run_step(args, other_port, other.pid, decisions, args.start, 3)
                return compare(args, (port, server.pid), (other_port, other.pid), decisions)
            finally:
                os.killpg(other.pid, signal.SIGTERM)
                other.wait(timeout=30)
        results = measure(args, port, server.pid, decisions, baseline)
        return 0 if report(args, results) else 1
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=300 if args.profile else 30)
        pg_admin(base_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


if __name__ == "__main__":
    sys.exit(main())
