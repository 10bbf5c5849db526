"""Waiting never takes capacity from deciding: decisions with 1,000 long-polls held on the node.

Run by hand (never by CI), from the project root; needs wrk and nginx (Debian packages),
PostgreSQL and Redis:

    .venv/bin/python benchmarks/waiters.py                      # 1,000 waiters
    .venv/bin/python benchmarks/waiters.py --waiters 200 --seconds 4

Loopback only, bounded: at most `MAX_WAITERS` waiters, each held at most `?wait=60` s, the
whole run in about a minute. One throwaway PostgreSQL database (`aimon_bench_waiters`) seeded
as benchmarks/skill_decisions.py seeds it, the production topology as `make prod` builds it
(scripts/prod.py: nginx in front of granian and uvicorn; Redis for wake-ups), then:

1. decisions (`wrk` on `POST /api/v1/skill-decisions` and `/bench/baseline` through nginx)
   with no waiter: requests/s, p99, server CPU per request;
2. N approval requests opened, N long-polls `GET /api/v1/approval-requests/{id}?wait=60`
   through nginx, one connection each, all subscribed; for `--idle-seconds` nothing
   happens: the database's transactions per second and the servers' CPU while N wait;
3. the same decisions again with the N waiters held;
4. `--clicks` of them answered one at a time (`request_answer`, what the button calls,
   here in this process: its wake-up goes through Redis to uvicorn): click to unblocked,
   p50 and p99; then every other one answered at once, and every poll must come back
   ANSWERED with its own request's answer (zero wrong, zero 5xx).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _http, servers, skill_decisions

BENCH_DB = "aimon_bench_waiters"
MAX_WAITERS = 2000
WAIT = 60


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] if ordered else float("nan")


def session_memory(session: int) -> tuple[int, float]:
    """(threads, resident MiB) of the live processes of one process session (Linux /proc)."""
    threads, rss_kib = 0, 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            stat = (status.parent / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[3]) != session:
                continue
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        threads += int(fields["Threads"])
        rss_kib += int(fields.get("VmRSS", "0 kB").split()[0])
    return threads, rss_kib / 1024


def transactions(database: str) -> int:
    rows = _http.pg_admin(
        _http.pg_base_url(),
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
        (database,),
    )
    return int(rows[0][0])


class Waiters:
    """N long-polls held on their own connections by one asyncio loop in a thread."""

    def __init__(self, port: int, token: str, ids: list[str]) -> None:
        self.port, self.token, self.ids = port, token, ids
        self.results: dict[str, tuple[int, dict, float]] = {}
        self.sent = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._all(),), daemon=True)

    async def _one(self, request_id: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(
            f"GET /api/v1/approval-requests/{request_id}?wait={WAIT} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {self.token}\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        self.sent += 1
        raw = await reader.read()
        returned = time.monotonic()
        writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        self.results[request_id] = (status, json.loads(body) if body else {}, returned)

    async def _all(self) -> None:
        await asyncio.gather(*(self._one(request_id) for request_id in self.ids), return_exceptions=False)

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise SystemExit(f"{len(self.ids) - len(self.results)} long-polls never returned")


def decisions(args: argparse.Namespace, port: int, token: str, sessions: list[int], database: str) -> dict:
    figures = {}
    for path in (servers.BASELINE, servers.DECISIONS):
        before = servers._cpu(sessions, database)
        requests, elapsed, p99 = servers.wrk(port, path, token, args.seconds, args.connections)
        used = servers._cpu(sessions, database) - before
        figures[path] = servers.Figure(requests / elapsed, p99, used * 1000 / requests)
    return figures


def show(label: str, figures: dict) -> None:
    base, real = figures[servers.BASELINE], figures[servers.DECISIONS]
    print(
        f"  {label}: decisions {real.rate:,.0f}/s p99 {real.p99_ms:.1f} ms {real.cpu_ms:.2f} ms CPU/req; "
        f"baseline {base.rate:,.0f}/s p99 {base.p99_ms:.1f} ms; ratio {real.rate / base.rate:.2f}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=4, help="each wrk run")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--clicks", type=int, default=30, help="answered one at a time and timed")
    parser.add_argument("--workers", type=int, default=2, help="WSGI workers")
    parser.add_argument("--threads", type=int, default=2, help="threads per WSGI worker")
    args = parser.parse_args()
    if not 1 <= args.waiters <= MAX_WAITERS:
        raise SystemExit(f"--waiters must be 1 to {MAX_WAITERS}")
    args.clicks = min(args.clicks, args.waiters)
    args.conn_max_age = 0
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")

    with (
        _http.throwaway_pg(BENCH_DB) as url,
        tempfile.TemporaryDirectory(prefix="aimon_bench_waiters_") as folder,
    ):
        env = _http.server_env(url, args)
        token = _http.child_json(skill_decisions.__file__, "--seed", env)["token"]
        env["REDIS_URL"] = redis_url
        os.environ.update(DJANGO_SETTINGS_MODULE="benchmarks.settings", DATABASE_URL=url, REDIS_URL=redis_url)
        os.environ.pop("CELERY_TASK_ALWAYS_EAGER", None)
        import django

        django.setup()
        from aimon_admin.accounts.models import User
        from aimon_admin.approvals.choices import Answer
        from aimon_admin.approvals.models import ApprovalRequest
        from aimon_admin.approvals.services import RequestInput, request_answer, request_create
        from aimon_admin.runtimes.models import AgentRuntime

        runtime = AgentRuntime.objects.get(name="bench")
        operator = User.objects.get(username="bench-operator")
        ids = [
            str(
                request_create(
                    RequestInput(
                        runtime=runtime, skills=["deploy-x"], session_id=f"w-{n}", principal=operator.username
                    )
                )[0].pk
            )
            for n in range(args.waiters)
        ]
        database = urllib.parse.urlsplit(url).path.lstrip("/")
        port = _http.free_port()
        print(
            f"{args.waiters:,} waiters; topology: nginx, granian {args.workers}x{args.threads}, uvicorn 1; "
            f"wrk -t1 -c{args.connections} {args.seconds}s",
            flush=True,
        )
        with servers.topology(env, port, args.workers, args.threads, Path(folder)) as sessions:
            _http.wait_until_up(port, token, timeout=60)
            servers.wrk(port, servers.DECISIONS, token, 2, args.connections)
            show("no waiter", decisions(args, port, token, sessions, database))

            import redis

            client = redis.Redis.from_url(redis_url)
            idle_threads, idle_rss = session_memory(sessions[1])
            waiters = Waiters(port, token, ids)
            opened = time.monotonic()
            waiters.start()
            channels = [f"aimon:approval-request:{i}" for i in ids]
            while True:
                counts = dict(client.pubsub_numsub(*channels))
                subscribed = sum(1 for c in channels if counts.get(c.encode(), 0) >= 1)
                if subscribed == len(ids):
                    break
                if time.monotonic() - opened > WAIT / 3:
                    raise SystemExit(f"only {subscribed:,} of {len(ids):,} waiters subscribed")
                time.sleep(0.2)
            print(f"  {len(ids):,} waiters subscribed in {time.monotonic() - opened:.1f} s", flush=True)
            wait_threads, wait_rss = session_memory(sessions[1])  # uvicorn, which holds the waiters
            print(
                f"  uvicorn with {len(ids):,} waiters: {wait_threads:,} threads, {wait_rss:,.0f} MiB resident"
                f" (before them: {idle_threads:,} threads, {idle_rss:,.0f} MiB)",
                flush=True,
            )
            # A waiter subscribes first, then reads its row once: with a thousand of them those
            # first reads run on past the last subscription. Idle starts when they are done
            # (no transaction for a second), or the figure would count them as waiting's cost.
            settling = time.monotonic()
            last = transactions(database)
            while time.monotonic() - settling < WAIT / 3:
                time.sleep(1.0)
                now = transactions(database)
                if now == last:
                    break
                last = now
            print(f"  their first reads done {time.monotonic() - settling:.1f} s later", flush=True)
            xact, cpu = transactions(database), servers._cpu(sessions, database)
            time.sleep(args.idle_seconds)
            xact_rate = (transactions(database) - xact) / args.idle_seconds
            cpu_share = (servers._cpu(sessions, database) - cpu) / args.idle_seconds
            print(
                f"  idle with {len(ids):,} waiters: {xact_rate:.1f} PostgreSQL transactions/s, "
                f"{cpu_share:.3f} of a core (servers and their backends)",
                flush=True,
            )
            show(f"{len(ids):,} waiters held", decisions(args, port, token, sessions, database))

            latencies = []
            for request_id in ids[: args.clicks]:
                clicked = time.monotonic()
                request_answer(
                    request=ApprovalRequest.objects.get(pk=request_id),
                    user=operator,
                    answer=Answer.ALLOW_SESSION,
                )
                while request_id not in waiters.results:
                    if time.monotonic() - clicked > 10:
                        raise SystemExit(f"{request_id}: not unblocked within 10 s of its answer")
                    time.sleep(0.0005)
                latencies.append((waiters.results[request_id][2] - clicked) * 1000)
            for request_id in ids[args.clicks :]:
                request_answer(
                    request=ApprovalRequest.objects.get(pk=request_id),
                    user=operator,
                    answer=Answer.DENY,
                )
            waiters.join(WAIT + 10)
            client.close()
            # A poll that reached its deadline before its answer came back PENDING: counted wrong below.

    wrong = [
        request_id
        for n, request_id in enumerate(ids)
        if waiters.results[request_id][0] != 200
        or waiters.results[request_id][1].get("status") != "ANSWERED"
        or waiters.results[request_id][1]["items"][0]["decision"] != ("ALLOW" if n < args.clicks else "DENY")
    ]
    print(
        f"  click to unblocked ({args.clicks} answered one at a time, {len(ids):,} waiting): "
        f"p50 {percentile(latencies, 50):.1f} ms, p99 {percentile(latencies, 99):.1f} ms, "
        f"mean {statistics.fmean(latencies):.1f} ms"
    )
    print(f"  every poll answered: {len(ids) - len(wrong):,} right, {len(wrong)} wrong or failed")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
