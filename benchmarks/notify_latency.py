"""Request opened → first webhook delivered (P1, P2).

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/notify_latency.py
    .venv/bin/python benchmarks/notify_latency.py --iterations 300 --redis redis://127.0.0.1:6379/14

Production's shape: a throwaway PostgreSQL database (`aimon_bench_notify`, created and
dropped here), Redis as the Celery broker, two web nodes (two uvicorn processes) and one
Celery worker (prefork, two processes). An organisation-wide webhook points at a receiver in
this process, which verifies each body's Standard Webhooks signature with the standardwebhooks
library. Each iteration opens an approval request over HTTP on one node, then the other (a
fresh session, so nothing decides it at creation), and times from just before the POST to
the receiver reading that request's signed webhook. Target: p99 ≤ 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _http

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BENCH_DB = "aimon_bench_notify"
TARGET_P99_MS = 1000.0


class Receiver:
    """A local endpoint: when each request's webhook arrived, its signature checked."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.bad = 0
        self.secret = ""
        self.event = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                at = time.monotonic()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(204)
                self.end_headers()
                receiver.record(at, body, dict(self.headers.items()))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def record(self, at: float, body: bytes, headers: dict[str, str]) -> None:
        from standardwebhooks.webhooks import Webhook

        try:
            payload = Webhook(self.secret).verify(body, headers)
        except Exception:
            self.bad += 1
            return
        if payload["type"] != "approval.requested":
            return
        with self.event:
            self.arrived.setdefault(payload["data"]["request"]["id"], at)
            self.event.notify_all()

    def wait_for(self, request_id: str, timeout: float) -> float | None:
        with self.event:
            self.event.wait_for(lambda: request_id in self.arrived, timeout)
            return self.arrived.get(request_id)


def setup() -> None:
    """In the product's environment: a runtime, its token and the webhook; prints them."""
    import django

    django.setup()
    from aimon_admin.core.actors import Actor
    from aimon_admin.notifications.services import webhook_create
    from aimon_admin.runtimes.services import runtime_create, token_issue

    actor = Actor.system("benchmark")
    runtime = runtime_create(name="bench-agent", actor=actor)
    _, token = token_issue(runtime=runtime, actor=actor, label="bench")
    _, secret = webhook_create(name="bench", url=os.environ["BENCH_RECEIVER"], actor=actor)
    print(json.dumps({"token": token, "secret": secret}))


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def node_up(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"node on {port} did not come up")


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--pause", type=float, default=0.05, help="seconds between requests")
    args = parser.parse_args()

    receiver = Receiver()
    folder = Path(tempfile.mkdtemp(prefix="aimon-bench-notify-"))
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
            "AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES": "1",  # the receiver is on 127.0.0.1
            "BENCH_RECEIVER": f"http://127.0.0.1:{receiver.port}/hook",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
        subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
        made = subprocess.run(
            [PYTHON, __file__, "--setup"], cwd=ROOT, env=env, check=True, capture_output=True, text=True
        )
        credentials = json.loads(made.stdout.strip().splitlines()[-1])
        receiver.secret = credentials["secret"]
        ports = [_http.free_port(), _http.free_port()]
        processes = [
            start(
                [
                    PYTHON,
                    "-m",
                    "uvicorn",
                    "aimon_admin.asgi:application",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--lifespan",
                    "off",
                    "--no-access-log",
                    "--log-level",
                    "warning",
                ],
                env,
                folder / f"node-{port}.log",
            )
            for port in ports
        ]
        processes.append(
            start(
                [
                    PYTHON,
                    "-m",
                    "celery",
                    "-A",
                    "aimon_admin",
                    "worker",
                    "-P",
                    "prefork",
                    "-Q",
                    "celery,notifications",
                    "-c",
                    "2",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "-l",
                    "WARNING",
                ],
                env,
                folder / "worker.log",
            )
        )
        try:
            for port in ports:
                node_up(port)
            connections = [HTTPConnection("127.0.0.1", port, timeout=30) for port in ports]
            headers = {"Authorization": f"Bearer {credentials['token']}", "Content-Type": "application/json"}
            samples: list[float] = []
            opens: list[float] = []  # the POST alone, for scale
            lost = 0
            warmup = 5
            for n in range(args.iterations + warmup):
                conn = connections[n % 2]
                body = json.dumps({"skills": ["deploy"], "session_id": f"bench-{n}", "reason": "benchmark"})
                started = time.monotonic()
                conn.request("POST", "/api/v1/approval-requests", body=body, headers=headers)
                response = conn.getresponse()
                answer = json.loads(response.read())
                opened = time.monotonic()
                if response.status != 201:
                    raise SystemExit(f"open failed: {response.status} {answer}")
                arrived = receiver.wait_for(answer["id"], timeout=30)
                if arrived is None:
                    lost += 1
                elif n >= warmup:
                    samples.append((arrived - started) * 1000)
                    opens.append((opened - started) * 1000)
                time.sleep(args.pause)
        finally:
            for process in processes:
                os.killpg(process.pid, signal.SIGTERM)
            for process in processes:
                process.wait(30)
    result = {
        "iterations": len(samples),
        "lost": lost,
        "bad_signatures": receiver.bad,
        "p50_ms": round(statistics.median(samples), 1),
        "p95_ms": round(percentile(samples, 95), 1),
        "p99_ms": round(percentile(samples, 99), 1),
        "max_ms": round(max(samples), 1),
        "open_request_p50_ms": round(statistics.median(opens), 1),
        "target_p99_ms": TARGET_P99_MS,
        "met": percentile(samples, 99) <= TARGET_P99_MS and lost == 0 and receiver.bad == 0,
    }
    print(json.dumps(result))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--setup"]:
        setup()
    else:
        sys.exit(main())
