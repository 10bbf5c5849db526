"""1,000 requests opened in a burst with 3 channels each (P2).

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/notify_burst.py
    .venv/bin/python benchmarks/notify_burst.py --requests 1000 --threads 8 --redis redis://127.0.0.1:6379/14

Production's shape, as benchmarks/notify_latency.py: a throwaway PostgreSQL database, Redis,
two web nodes and one Celery worker (prefork, `--worker-concurrency` processes, two by
default). First a burst with no channel at all, then the same burst with three channels
for the person each request is for (a signed webhook, an ntfy and a JSON channel through
Apprise, all local receivers in this process). Figures: each burst's creation rate
(requests opened per second over HTTP, from `--threads` clients alternating between the
nodes), their ratio (target ≥ 0.9), and, once the worker has drained the queue, every
delivery made exactly once: none lost, none twice.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _http
from benchmarks.notify_latency import node_up, start

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BENCH_DB = "aimon_bench_notify_burst"
TARGET_RATIO = 0.9


class Receivers:
    """One local endpoint for the three channels: which request each message named, by path."""

    def __init__(self) -> None:
        self.got: Counter[tuple[str, str]] = Counter()
        self.lock = threading.Lock()
        receivers = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                if self.path == "/hook":
                    if body["type"] != "approval.requested":
                        return
                    request_id = body["data"]["request"]["id"]
                else:
                    request_id = body["message"].split("/approvals/requests/", 1)[1].split("/", 1)[0]
                with receivers.lock:
                    receivers.got[(self.path, request_id)] += 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def told(self, ids: set[str]) -> int:
        """How many messages named one of `ids`."""
        with self.lock:
            return sum(times for (_, request_id), times in self.got.items() if request_id in ids)


def setup(step: str) -> None:
    """In the product's environment: `base` a runtime, its token and the person the requests
    are for; `channels` the first burst's requests cancelled (through the service, as the
    runtime would: left pending, the sweep would rightly tell the new channels of them too,
    P2, and their messages would queue ahead of the second burst's), then that person's two
    channels and the organisation's webhook."""
    import django

    django.setup()
    from aimon_admin.accounts.models import User
    from aimon_admin.accounts.roles import Role
    from aimon_admin.accounts.services import user_create
    from aimon_admin.core.actors import Actor
    from aimon_admin.notifications.choices import ChannelKind
    from aimon_admin.notifications.services import channel_add, webhook_create
    from aimon_admin.runtimes.services import runtime_create, token_issue

    actor = Actor.system("benchmark")
    if step == "base":
        runtime = runtime_create(name="bench-agent", actor=actor)
        _, token = token_issue(runtime=runtime, actor=actor, label="bench")
        user_create(username="alice", password=secrets.token_urlsafe(16), roles=[Role.APPROVER], actor=actor)
        print(json.dumps({"token": token}))
        return
    from aimon_admin.approvals.choices import RequestStatus
    from aimon_admin.approvals.models import ApprovalRequest
    from aimon_admin.approvals.services import request_cancel

    for pending in ApprovalRequest.objects.filter(status=RequestStatus.PENDING):
        request_cancel(request=pending, actor=actor, why="the benchmark's first burst is over")
    base = os.environ["BENCH_RECEIVER"]
    alice = User.objects.get(username="alice")
    webhook_create(name="bench", url=f"http://{base}/hook", actor=actor)
    channel_add(owner=alice, kind=ChannelKind.APPRISE, name="json", target=f"json://{base}/json", actor=actor)
    channel_add(
        owner=alice, kind=ChannelKind.APPRISE, name="ntfy", target=f"ntfy://{base}/burst", actor=actor
    )
    print(json.dumps({"channels": 3}))


def burst(ports: list[int], token: str, count: int, threads: int, label: str) -> tuple[float, list[str]]:
    """Open `count` requests from `threads` clients; (requests per second, their ids)."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    ids: list[str] = []
    failures: list[str] = []
    lock = threading.Lock()
    next_n = iter(range(count))

    def client(k: int) -> None:
        conn = HTTPConnection("127.0.0.1", ports[k % 2], timeout=60)
        while True:
            with lock:
                n = next(next_n, None)
            if n is None:
                return
            # An hour to expire: a message for a request that expired before it went out is
            # rightly skipped (a person is asked only what is still open), which is not a loss.
            body = json.dumps(
                {
                    "skills": ["deploy"],
                    "session_id": f"{label}-{n}",
                    "principal": "alice",
                    "timeout_seconds": 3600,
                }
            )
            conn.request("POST", "/api/v1/approval-requests", body=body, headers=headers)
            response = conn.getresponse()
            answer = json.loads(response.read())
            with lock:
                (ids if response.status == 201 else failures).append(answer.get("id", str(answer)))

    workers = [threading.Thread(target=client, args=(k,)) for k in range(threads)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - started
    if failures:
        raise SystemExit(f"{len(failures)} requests failed to open, e.g. {failures[0]}")
    return count / elapsed, ids


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--drain-seconds", type=float, default=600.0)
    parser.add_argument(
        "--worker-concurrency", type=int, default=2, help="the worker's processes (make prod: one per CPU)"
    )
    args = parser.parse_args()

    receivers = Receivers()
    folder = Path(tempfile.mkdtemp(prefix="aimon-bench-burst-"))
    with _http.throwaway_pg(BENCH_DB) as database_url:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "AIMON_", "CELERY_"))},
            "DJANGO_SETTINGS_MODULE": "aimon_admin.settings.base",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(48),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
            "DJANGO_SECURE_COOKIES": "0",
            "DATABASE_URL": database_url,
            "REDIS_URL": args.redis,
            "CELERY_TASK_ALWAYS_EAGER": "0",
            "AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES": "1",
            "BENCH_RECEIVER": f"127.0.0.1:{receivers.port}",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
        subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)

        def step(name: str) -> dict[str, Any]:
            done = subprocess.run(
                [PYTHON, __file__, "--setup", name],
                cwd=ROOT,
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            return json.loads(done.stdout.strip().splitlines()[-1])

        token = step("base")["token"]
        ports = [_http.free_port(), _http.free_port()]
        processes = [
            start(
                [PYTHON, "-m", "uvicorn", "aimon_admin.asgi:application", "--host", "127.0.0.1", "--port",
                 str(port), "--lifespan", "off", "--no-access-log", "--log-level", "warning"],
                env, folder / f"node-{port}.log",
            )
            for port in ports
        ]  # fmt: skip
        processes.append(
            start(
                [PYTHON, "-m", "celery", "-A", "aimon_admin", "worker", "-P", "prefork",
                 "-Q", "celery,notifications", "-c", str(args.worker_concurrency),
                 "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING"],
                env, folder / "worker.log",
            )
        )  # fmt: skip
        try:
            for port in ports:
                node_up(port)
            burst(ports, token, 50, args.threads, "warmup")
            without, _ = burst(ports, token, args.requests, args.threads, "plain")
            step("channels")
            with_channels, ids = burst(ports, token, args.requests, args.threads, "told")
            expected = 3 * len(ids)
            deadline = time.monotonic() + args.drain_seconds
            drain_started = time.monotonic()
            while receivers.told(set(ids)) < expected and time.monotonic() < deadline:
                time.sleep(0.5)
            drained_in = time.monotonic() - drain_started
            time.sleep(3)  # anything sent twice would arrive by now
        finally:
            for process in processes:
                os.killpg(process.pid, signal.SIGTERM)
            for process in processes:
                process.wait(30)
    told = set(ids)
    per_channel = dict.fromkeys(("/hook", "/json", "/"), 0)
    twice = earlier = 0
    for (path, request_id), times in receivers.got.items():
        twice += times - 1
        if request_id in told:
            per_channel[path] += 1
        else:
            # A request of the first burst still queued when the channels were added: it is
            # pending, so its person is told too (once).
            earlier += 1
    lost = sum(len(ids) - received for received in per_channel.values())
    result = {
        "requests": args.requests,
        "threads": args.threads,
        "open_per_s_without_channels": round(without, 1),
        "open_per_s_with_3_channels": round(with_channels, 1),
        "ratio": round(with_channels / without, 3),
        "target_ratio": TARGET_RATIO,
        "deliveries_expected": expected,
        "received_once": sum(per_channel.values()),
        "lost": lost,
        "received_twice": twice,
        "earlier_requests_told": earlier,
        "drained_seconds_after_burst": round(drained_in, 1),
    }
    result["met"] = result["ratio"] >= TARGET_RATIO and lost == 0 and twice == 0
    print(json.dumps(result))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--setup"]:
        setup(sys.argv[2])
    else:
        sys.exit(main())
