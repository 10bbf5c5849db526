"""1,000 runtimes opening a request and long-polling it within 10 s, on one node.

Run by hand (never by CI), from the project root; needs wrk and nginx (Debian packages),
PostgreSQL and Redis:

    .venv/bin/python benchmarks/waiter_arrivals.py                 # 1,000 arriving in 10 s
    .venv/bin/python benchmarks/waiter_arrivals.py --runtimes 300 --arrive-seconds 3

Loopback only, bounded: at most `MAX_RUNTIMES`, each poll held at most `?wait=60` s. One
throwaway PostgreSQL database (`aimon_bench_arrivals`) seeded as benchmarks/skill_decisions.py
seeds it, and make prod's topology built by scripts/prod.py's own code (nginx in front of
granian 2x2 for short requests and uvicorn 1 for long-polls, each process with the product's
default pool of 20 connections; Redis for wake-ups). Then, with wrk sending decisions
(`POST /api/v1/skill-decisions` through nginx, closed loop) in each phase:

1. no waiter;
2. N runtimes arriving evenly over `--arrive-seconds`, each opening a request (to granian)
   and not waiting on it: the baseline for the arrivals (opening has a cost of its own;
   what waiting adds is wanted);
3. once they are in (VACUUM ANALYZE after each burst, so that no measured phase carries
   autovacuum's work on the new rows): nobody waiting, the baseline for the waiters held;
4. N more arriving the same way, each opening a request and at once long-polling it
   (`GET …?wait=60`, to uvicorn), one connection each: decisions while they arrive. Every
   `--early-every`-th is answered `--answer-after` s after its poll was sent, while the
   others still arrive;
5. with every poll held;
6. the rest answered one after another (`request_answer`, what the button calls, in this
   process; its wake-up goes through Redis to uvicorn), then no waiter again.

Printed: refusals of the opens and of the polls (target 0); the polls held until their answer
(target all); answer to unblocked for every poll, p50 / p99 / max, from the answer's commit
to the poll's last byte (target p99 ≤ 1 s), and for the early ones alone; every poll's answer
checked against its own request's; decisions while they arrive / while they only open, and
with them held / with nobody waiting after the same number of opens, by rate and by the
servers' CPU per decision, uvicorn's included (target ≥ 0.9); the cores each process used in
each phase; uvicorn's CPU per arrival, its threads and memory while they wait, their Redis
connections and the database's connections. The machine may be shared: read the ratios, the
CPU per decision before the rate. Exit status 1 if any poll was refused, not held or answered
wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import os
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _http, servers, skill_decisions
from benchmarks.waiters import percentile, session_memory

BENCH_DB = "aimon_bench_arrivals"
MAX_RUNTIMES = 2000
WAIT = 60
PRINCIPAL = "bench-operator"
TARGET_RATIO = 0.9
TARGET_P99_MS = 1000


@dataclass
class Runtime:
    """One runtime's open and long-poll, as the benchmark saw them."""

    n: int
    request_id: str | None = None
    open_status: int | None = None
    sent_at: float | None = None  # the poll's request written
    status: int | None = None
    body: dict = field(default_factory=dict)
    returned_at: float | None = None
    answered_at: float | None = None  # the answer committed
    decision: str = ""

    @property
    def settled(self) -> bool:
        """Its poll was sent, or its open failed: it has arrived."""
        return self.sent_at is not None or self.open_status not in (None, 201)


async def exchange(port: int, method: str, path: str, token: str, body: bytes = b"") -> tuple[int, bytes]:
    """One HTTP/1.1 request on a connection of its own; (status, body), status 0 when the
    connection failed or closed with no answer."""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        return 0, str(exc).encode()
    try:
        writer.write(head.encode() + body)
        await writer.drain()
        raw = await reader.read()
    except OSError as exc:
        return 0, str(exc).encode()
    finally:
        writer.close()
    head_bytes, _, payload = raw.partition(b"\r\n\r\n")
    status_line = head_bytes.split(b"\r\n", 1)[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[1].isdigit():
        return 0, raw[:200]
    if b"transfer-encoding: chunked" in head_bytes.lower():
        payload = dechunk(payload)
    return int(status_line[1]), payload


def dechunk(data: bytes) -> bytes:
    out, rest = b"", data
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return out


class Answerer:
    """Answers requests when due, one at a time, as an approver's clicks would (in this process)."""

    def __init__(self) -> None:
        self.due: list[tuple[float, int, Runtime, str]] = []
        self.cond = threading.Condition()
        self.stopping = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def add(self, runtime: Runtime, at: float, decision: str) -> None:
        with self.cond:
            heapq.heappush(self.due, (at, runtime.n, runtime, decision))
            self.cond.notify()

    def _next(self) -> tuple[Runtime, str] | None:
        with self.cond:
            while not self.due or self.due[0][0] > time.monotonic():
                if self.stopping and not self.due:
                    return None
                self.cond.wait(max(0.0, self.due[0][0] - time.monotonic()) if self.due else None)
            _, _, runtime, decision = heapq.heappop(self.due)
            return runtime, decision

    def _run(self) -> None:
        from django.db import close_old_connections

        from aimon_admin.accounts.models import User
        from aimon_admin.approvals.choices import Answer
        from aimon_admin.approvals.models import ApprovalRequest
        from aimon_admin.approvals.services import request_answer

        operator = User.objects.get(username=PRINCIPAL)
        answers = {"ALLOW": Answer.ALLOW_SESSION, "DENY": Answer.DENY}
        try:
            while (item := self._next()) is not None:
                runtime, decision = item
                request = ApprovalRequest.objects.get(pk=runtime.request_id)
                request_answer(request=request, user=operator, answer=answers[decision])
                runtime.answered_at, runtime.decision = time.monotonic(), decision
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            close_old_connections()

    def finish(self, timeout: float) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()
        self.thread.join(timeout)
        if self.error is not None:
            raise SystemExit(f"answering failed: {self.error!r}")


class Arrivals:
    """Runtimes arriving evenly over `seconds`, each opening a request and then (with an
    answerer) long-polling it, on one asyncio loop in a thread."""

    def __init__(
        self, args: argparse.Namespace, port: int, token: str, label: str, answerer: Answerer | None
    ):
        self.args, self.port, self.token, self.label, self.answerer = args, port, token, label, answerer
        self.runtimes = [Runtime(n) for n in range(args.runtimes)]
        self.thread = threading.Thread(target=asyncio.run, args=(self._all(),), daemon=True)
        self.thread.start()

    async def _one(self, runtime: Runtime, start: float) -> None:
        arrives = start + runtime.n * self.args.arrive_seconds / len(self.runtimes)
        await asyncio.sleep(max(0.0, arrives - time.monotonic()))
        body = {"skills": ["deploy-x"], "session_id": f"{self.label}-{runtime.n}", "principal": PRINCIPAL}
        path = "/api/v1/approval-requests"
        status, payload = await exchange(self.port, "POST", path, self.token, json.dumps(body).encode())
        runtime.open_status = status
        if status != 201:
            return
        runtime.request_id = json.loads(payload)["id"]
        if self.answerer is None:  # opening only
            return
        poll = asyncio.ensure_future(
            exchange(self.port, "GET", f"{path}/{runtime.request_id}?wait={WAIT}", self.token)
        )
        runtime.sent_at = time.monotonic()
        if self.args.early_every and runtime.n % self.args.early_every == 0:
            self.answerer.add(runtime, runtime.sent_at + self.args.answer_after, "ALLOW")
        runtime.status, payload = await poll
        runtime.returned_at = time.monotonic()
        try:
            runtime.body = json.loads(payload) if payload else {}
        except ValueError:
            runtime.body = {"unreadable": payload[:200].decode(errors="replace")}

    async def _all(self) -> None:
        start = time.monotonic() + 0.2
        await asyncio.gather(*(self._one(runtime, start) for runtime in self.runtimes))

    def arrived(self) -> bool:
        return all(runtime.settled for runtime in self.runtimes)

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            left = sum(1 for r in self.runtimes if r.returned_at is None)
            raise SystemExit(f"{left} runtimes never finished")


class Phases:
    """wrk's decisions in each phase, with the cores each process used meanwhile."""

    def __init__(self, args: argparse.Namespace, port: int, token: str, sessions: list[int], database: str):
        self.args, self.port, self.token, self.sessions, self.database = args, port, token, sessions, database
        self.rates: dict[str, float] = {}
        self.cpu_ms: dict[str, float] = {}

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of granian, uvicorn, nginx, the database's backends and this process."""
        names = ("granian", "uvicorn", "nginx")
        split = {
            name: _http.server_cpu_seconds(_http.Server(0, session, None))
            for name, session in zip(names, self.sessions, strict=True)
        }
        split["postgres"] = _http.server_cpu_seconds(_http.Server(0, -1, self.database))
        times = os.times()
        split["client"] = times.user + times.system
        return split

    def measure(self, label: str, seconds: float) -> dict[str, float]:
        """Decisions for `seconds`; prints them and the cores used; returns the cores."""
        before, started = self.cpu(), time.monotonic()
        requests, elapsed, p99 = servers.wrk(
            self.port, servers.DECISIONS, self.token, max(1, round(seconds)), self.args.connections
        )
        took = time.monotonic() - started
        cores = {name: (used - before[name]) / took for name, used in self.cpu().items()}
        self.rates[label] = requests / elapsed
        # Everything the servers spent (waiters included), per decision: steadier than the rate
        # on a shared machine, and meaningless while requests are being opened too.
        self.cpu_ms[label] = sum(v for k, v in cores.items() if k != "client") * took * 1000 / requests
        shares = ", ".join(f"{name} {share:.2f}" for name, share in cores.items())
        print(
            f"  decisions {label}: {self.rates[label]:,.0f}/s (p99 {p99:.1f} ms, servers' CPU "
            f"{self.cpu_ms[label]:.2f} ms per decision); cores: {shares}",
            flush=True,
        )
        return cores


def settle(url: str) -> None:
    """After a burst of opens: VACUUM ANALYZE, so that autovacuum's work on the new rows (its
    CPU counts as the database's) falls in no measured phase, and a second to settle."""
    _http.pg_admin(url, "VACUUM ANALYZE")
    time.sleep(1.0)


def waiters_redis_connections(redis_url: str) -> int:
    """Redis's pub/sub clients named as the long-poll's are (`aimon-wait-…`)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return sum(
            1 for c in client.client_list(_type="pubsub") if c.get("name", "").startswith("aimon-wait-")
        )
    finally:
        client.close()


def pg_connections(database: str) -> int:
    sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
    return int(_http.pg_admin(_http.pg_base_url(), sql, (database,))[0][0])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runtimes", type=int, default=1000)
    parser.add_argument("--arrive-seconds", type=float, default=10.0)
    parser.add_argument("--early-every", type=int, default=10, help="every n-th answered as the rest arrive")
    parser.add_argument("--answer-after", type=float, default=1.0, help="seconds after its poll was sent")
    parser.add_argument("--seconds", type=int, default=5, help="wrk's run with no waiter and with them held")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="WSGI workers")
    parser.add_argument("--threads", type=int, default=2, help="threads per WSGI worker")
    args = parser.parse_args()
    if not 1 <= args.runtimes <= MAX_RUNTIMES:
        raise SystemExit(f"--runtimes must be 1 to {MAX_RUNTIMES}")
    args.conn_max_age = 0
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")

    with (
        _http.throwaway_pg(BENCH_DB) as url,
        tempfile.TemporaryDirectory(prefix="aimon_bench_arrivals_") as folder,
    ):
        env = _http.server_env(url, args)
        token = _http.child_json(skill_decisions.__file__, "--seed", env)["token"]
        env["REDIS_URL"] = redis_url
        os.environ.update(DJANGO_SETTINGS_MODULE="benchmarks.settings", DATABASE_URL=url, REDIS_URL=redis_url)
        os.environ.pop("CELERY_TASK_ALWAYS_EAGER", None)
        import django

        django.setup()
        database = urllib.parse.urlsplit(url).path.lstrip("/")
        port = _http.free_port()
        print(
            f"{args.runtimes:,} runtimes arriving over {args.arrive_seconds:g} s, every "
            f"{args.early_every}th answered {args.answer_after:g} s after its poll; make prod's topology: "
            f"nginx, granian {args.workers}x{args.threads}, uvicorn 1; wrk -t1 -c{args.connections}",
            flush=True,
        )
        with servers.topology(env, port, args.workers, args.threads, Path(folder)) as sessions:
            _http.wait_until_up(port, token, timeout=60)
            servers.wrk(port, servers.DECISIONS, token, 2, args.connections)  # warm
            phases = Phases(args, port, token, sessions, database)
            phases.measure("with no waiter", args.seconds)
            idle_threads, idle_rss = session_memory(sessions[1])

            openers = Arrivals(args, port, token, "open", None)
            phases.measure("while they open, not waiting", args.arrive_seconds)
            openers.join(args.arrive_seconds + 30)
            settle(url)
            phases.measure("after they opened, none waiting", args.seconds)

            answerer = Answerer()
            arrivals = Arrivals(args, port, token, "wait", answerer)
            cores = phases.measure("while they open and wait", args.arrive_seconds)
            deadline = time.monotonic() + 30
            while not arrivals.arrived():
                if time.monotonic() > deadline:
                    raise SystemExit("the runtimes did not all open and poll in time")
                time.sleep(0.1)
            settle(url)
            threads, rss = session_memory(sessions[1])
            per_arrival = cores["uvicorn"] * args.arrive_seconds * 1000 / args.runtimes
            print(
                f"  uvicorn: {per_arrival:.2f} ms CPU per arrival; while they wait {threads:,} threads, "
                f"{rss:,.0f} MiB (before them: {idle_threads:,}, {idle_rss:,.0f} MiB); their Redis "
                f"connections: {waiters_redis_connections(redis_url):,}; PostgreSQL connections to the "
                f"database: {pg_connections(database)}",
                flush=True,
            )
            phases.measure("with them held", args.seconds)

            for runtime in arrivals.runtimes:
                if runtime.request_id is not None and runtime.returned_at is None and runtime.decision == "":
                    answerer.add(runtime, 0.0, "DENY")
            answerer.finish(WAIT + 30)
            arrivals.join(WAIT + 30)
            settle(url)
            phases.measure("with no waiter, again", args.seconds)

    return report(arrivals.runtimes + openers.runtimes, arrivals.runtimes, phases)


def report(everyone: list[Runtime], runtimes: list[Runtime], phases: Phases) -> int:
    opens_refused = [r for r in everyone if r.open_status != 201]
    polled = [r for r in runtimes if r.request_id is not None]
    refused = [r for r in polled if r.status != 200]
    early = [
        r for r in polled if r.status == 200 and (r.answered_at is None or r.returned_at < r.answered_at)
    ]
    wrong = [
        r
        for r in polled
        if r.status == 200
        and (
            r.body.get("id") != r.request_id
            or r.body.get("status") != "ANSWERED"
            or r.body["items"][0]["decision"] != r.decision
        )
    ]
    right = [r for r in polled if r.status == 200 and r not in early and r not in wrong]
    woken = [(r.returned_at - r.answered_at) * 1000 for r in right]
    first = [(r.returned_at - r.answered_at) * 1000 for r in right if r.decision == "ALLOW"]
    statuses = sorted({str(r.status) for r in refused})
    print(f"  opens refused: {len(opens_refused)}; polls refused: {len(refused)} {' '.join(statuses)}")
    print(f"  held until answered: {len(polled) - len(early) - len(refused):,} of {len(polled):,}")

    def spread(values: list[float]) -> str:
        worst = max(values, default=float("nan"))
        return f"p50 {percentile(values, 50):.0f} ms, p99 {percentile(values, 99):.0f} ms, max {worst:.0f} ms"

    p99 = percentile(woken, 99)
    met = "met" if p99 <= TARGET_P99_MS else "missed"
    print(
        f"  answer to unblocked, all {len(woken):,}: {spread(woken)} (target p99 ≤ {TARGET_P99_MS} ms: {met})"
    )
    print(f"  of which answered while the others arrived ({len(first)}): {spread(first)}")
    print(f"  every poll its own answer: {len(right):,} right, {len(wrong)} wrong")
    rates, cpu_ms = phases.rates, phases.cpu_ms
    arriving = rates["while they open and wait"] / rates["while they open, not waiting"]
    baseline = "after they opened, none waiting"
    held = rates["with them held"] / rates[baseline]
    cost = cpu_ms[baseline] / cpu_ms["with them held"]
    print(
        f"  decisions while they open and wait / while they only open: {arriving:.2f}; with them held / "
        f"after the others opened, none waiting: {held:.2f}, by the servers' CPU per decision "
        f"{cost:.2f} (target ≥ {TARGET_RATIO})"
    )
    return 0 if not opens_refused and not refused and not early and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
