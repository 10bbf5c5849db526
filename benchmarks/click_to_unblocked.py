"""Click to unblocked: from a person's answer to the runtime's waiting long-poll returning.

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/click_to_unblocked.py
    .venv/bin/python benchmarks/click_to_unblocked.py --modes redis embedded --iterations 100

Each iteration opens an approval request (a fresh session, so nothing is decided at
creation), starts `GET /api/v1/approval-requests/{id}?wait=30` over HTTP on 127.0.0.1 in
a thread, waits until that poll has subscribed for wake-ups and is waiting, then answers
through `request_answer` (what the browser's button calls) and times from just before
the answer to the poll's response being read in full. Modes:

* `redis` (production, target p99 ≤ 50 ms): PostgreSQL (`aimon_bench_approvals`, created
  and dropped here) and Redis, and two web nodes (two uvicorn processes): the approver,
  signed in on node A, clicks *Allow for this session* — an htmx POST over HTTP, as the
  browser sends it — while the runtime's long-poll waits on node B, so the wake-up can
  only travel through Redis pub/sub. Timed from sending the POST.
* `embedded` (the embedded default, target p99 ≤ 1.5 s): a SQLite file in a temporary
  folder, no Redis; uvicorn runs in this process, as `make run` does, so the answer's
  wake-up is an in-process event.
* `repoll` (embedded, but the answer is made in another process, so no wake-up reaches
  the poll; target p99 ≤ 1.5 s): what a lost wake-up costs. The answer comes at a random
  moment of the poll's re-read cycle.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BENCH_DB = "aimon_bench_approvals"
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS = "redis://127.0.0.1:6379/14"
TARGETS_MS = {"redis": 50.0, "embedded": 1500.0, "repoll": 1500.0}
WAIT = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# --- One mode, in a child process with that mode's environment ------------------------------------


class Poll(threading.Thread):
    def __init__(self, port: int, token: str, request_id: str) -> None:
        super().__init__(daemon=True)
        self.conn = HTTPConnection("127.0.0.1", port, timeout=WAIT + 10)
        self.conn.connect()  # before the clock starts
        self.path = f"/api/v1/approval-requests/{request_id}?wait={WAIT}"
        self.token = token
        self.body: dict[str, Any] | None = None
        self.returned_at = 0.0
        self.start()

    def run(self) -> None:
        self.conn.request("GET", self.path, headers={"Authorization": f"Bearer {self.token}"})
        response = self.conn.getresponse()
        self.body = json.loads(response.read())
        self.returned_at = time.perf_counter()
        self.conn.close()


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("the long-poll never subscribed")
        time.sleep(0.001)


def start_node(port: int) -> subprocess.Popen:
    """A web node: uvicorn in a process of its own, on this benchmark's environment."""
    args = ["--host", "127.0.0.1", "--port", str(port), "--lifespan", "off", "--no-access-log"]
    return subprocess.Popen(
        [PYTHON, "-m", "uvicorn", "aimon_admin.asgi:application", *args, "--log-level", "warning"],
        cwd=ROOT,
        env=os.environ.copy(),
        start_new_session=True,
    )


def wait_until_up(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("uvicorn did not come up")


class Browser:
    """A signed-in person on one node: a kept-alive connection, the session cookie, CSRF."""

    def __init__(self, port: int, username: str, password: str) -> None:
        self.conn = HTTPConnection("127.0.0.1", port, timeout=30)
        self.cookies: dict[str, str] = {}
        page = self._send("GET", "/accounts/login/")
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1).decode()
        form = urllib.parse.urlencode(
            {"username": username, "password": password, "csrfmiddlewaretoken": token}
        )
        self._send("POST", "/accounts/login/", form, expect=302)
        if "sessionid" not in self.cookies:
            raise SystemExit("signing in on node A failed")

    def _send(
        self, method: str, path: str, body: str | None = None, *, expect: int = 200, **headers: str
    ) -> bytes:
        headers = {
            "Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items()),
            "Referer": f"http://127.0.0.1:{self.conn.port}/",
            **headers,
        }
        if body is not None:
            headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
            headers["X-CSRFToken"] = self.cookies.get("csrftoken", "")
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        content = response.read()
        for header, value in response.getheaders():
            if header.lower() == "set-cookie":
                name, _, rest = value.partition("=")
                self.cookies[name.strip()] = rest.split(";", 1)[0]
        if response.status != expect:
            raise SystemExit(f"{method} {path}: {response.status} {content[:300]!r}")
        return content

    def click(self, request_id: str, answer: str) -> None:
        """The inbox button: an htmx POST answering every skill of the request."""
        self._send(
            "POST",
            f"/approvals/requests/{request_id}/answer/",
            urllib.parse.urlencode({"answer": answer}),
            **{"HX-Request": "true"},
        )


def run_mode(mode: str, iterations: int) -> None:
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from aimon_admin.accounts.roles import Role
    from aimon_admin.accounts.services import user_create
    from aimon_admin.approvals import wakeups
    from aimon_admin.approvals.choices import Answer
    from aimon_admin.approvals.services import RequestInput, request_answer, request_create
    from aimon_admin.core.actors import Actor
    from aimon_admin.runtimes.services import runtime_create, token_issue

    call_command("migrate", "--noinput", verbosity=0)
    actor = Actor.system("benchmark")
    password = "bench-password-not-secret-0123456789"  # noqa: S105 - a throwaway database's
    operator = user_create(username="bench-operator", password=password, roles=[Role.OPERATOR], actor=actor)
    runtime = runtime_create(name="bench", actor=actor)
    _, token = token_issue(runtime=runtime, actor=actor, label="benchmark")

    port = free_port()
    process = thread = server = node_a = None
    browser = None
    if mode == "embedded":
        import uvicorn

        config = uvicorn.Config(
            "aimon_admin.asgi:application",
            host="127.0.0.1",
            port=port,
            lifespan="off",
            access_log=False,
            log_level="warning",
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
    else:
        process = start_node(port)
        if mode == "redis":
            node_a_port = free_port()
            node_a = start_node(node_a_port)
    redis_client = None
    if mode == "redis":
        import redis

        redis_client = redis.Redis.from_url(settings.REDIS_URL)

    def subscribed(request_id: str) -> bool:
        channel = wakeups.channel_for(request_id)
        if redis_client is not None:
            return dict(redis_client.pubsub_numsub(channel)).get(channel.encode(), 0) >= 1
        return bool(wakeups._waiters.get(channel))

    latencies: list[float] = []
    after_commit: list[float] = []
    answering: list[float] = []
    try:
        wait_until_up(port)
        if node_a is not None:
            wait_until_up(node_a_port)
            browser = Browser(node_a_port, operator.username, password)
        for i in range(iterations + 5):  # the first five warm up
            request, _ = request_create(
                RequestInput(
                    runtime=runtime, skills=["deploy"], session_id=f"s-{i}", principal=operator.username
                )
            )
            poll = Poll(port, token, str(request.pk))
            if mode == "repoll":
                time.sleep(0.05 + random.random() * wakeups.REPOLL_SECONDS)  # anywhere in its cycle
            else:
                wait_for(lambda request=request: subscribed(str(request.pk)))
                time.sleep(0.05)  # past its first read: waiting for the wake-up
            clicked = time.perf_counter()
            if browser is not None:
                browser.click(str(request.pk), Answer.ALLOW_SESSION.value)
            else:
                request_answer(request=request, user=operator, answer=Answer.ALLOW_SESSION)
            committed = time.perf_counter()  # answered: written, committed, wake-up published
            poll.join(WAIT + 10)
            if poll.body is None or poll.body.get("status") != "ANSWERED":
                raise SystemExit(f"iteration {i}: unexpected poll result {poll.body}")
            if i >= 5:
                latencies.append((poll.returned_at - clicked) * 1000)
                after_commit.append((poll.returned_at - committed) * 1000)
                answering.append((committed - clicked) * 1000)
    finally:
        if server is not None and thread is not None:
            server.should_exit = True
            thread.join(10)
        for node in (process, node_a):
            if node is not None:
                os.killpg(node.pid, signal.SIGTERM)
                node.wait(timeout=30)
        if redis_client is not None:
            redis_client.close()
    print(
        json.dumps(
            {
                "n": len(latencies),
                "p50": percentile(latencies, 50),
                "p90": percentile(latencies, 90),
                "p99": percentile(latencies, 99),
                "max": max(latencies),
                "mean": statistics.fmean(latencies),
                "answer_p50": percentile(answering, 50),
                "answer_p99": percentile(answering, 99),
                "after_commit_p50": percentile(after_commit, 50),
                "after_commit_p99": percentile(after_commit, 99),
                "repoll_seconds": wakeups.REPOLL_SECONDS,
            }
        )
    )


# --- Orchestration ---------------------------------------------------------------------------------


def pg_admin(base_url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(base_url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        conn.execute(sql)


def pg_url_for(base_url: str, name: str) -> str:
    parts = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def child(mode: str, iterations: int, database_url: str, redis_url: str | None) -> dict[str, float]:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="benchmarks.settings",
        DATABASE_URL=database_url,
        DATABASE_CONN_MAX_AGE="0",
        PYTHONPATH=str(ROOT),
        CELERY_TASK_ALWAYS_EAGER="1",
    )
    env.pop("REDIS_URL", None)
    if redis_url:
        env["REDIS_URL"] = redis_url
    out = subprocess.run(
        [PYTHON, __file__, "--mode", mode, "--iterations", str(iterations)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(mode: str, figures: dict[str, float]) -> bool:
    target = TARGETS_MS[mode]
    print(
        f"{mode}: click to unblocked p50 {figures['p50']:.1f} ms, p90 {figures['p90']:.1f} ms, "
        f"p99 {figures['p99']:.1f} ms, max {figures['max']:.1f} ms (n={figures['n']:.0f}; "
        f"target p99 ≤ {target:.0f} ms; re-poll every {figures['repoll_seconds']} s)\n"
        f"    of which the answer itself (in `redis` mode the POST's whole response): "
        f"p50 {figures['answer_p50']:.1f} ms, p99 {figures['answer_p99']:.1f} ms; "
        f"from its commit to the poll's response: "
        f"p50 {figures['after_commit_p50']:.1f} ms, p99 {figures['after_commit_p99']:.1f} ms"
    )
    return figures["p99"] <= target


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--modes", nargs="+", choices=list(TARGETS_MS), default=list(TARGETS_MS))
    parser.add_argument(
        "--iterations", type=int, default=200, help="answers timed per mode (repoll: a fifth)"
    )
    parser.add_argument("--mode", choices=list(TARGETS_MS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        run_mode(args.mode, args.iterations)
        return 0

    ok = True
    for mode in args.modes:
        if mode == "redis":
            base_url = os.environ.get("DATABASE_URL") or DEFAULT_PG
            if not base_url.startswith(("postgres://", "postgresql://")):
                base_url = DEFAULT_PG
            pg_admin(base_url, f"DROP DATABASE IF EXISTS {BENCH_DB}")
            pg_admin(base_url, f"CREATE DATABASE {BENCH_DB}")
            try:
                redis_url = os.environ.get("AIMON_BENCH_REDIS_URL", DEFAULT_REDIS)
                figures = child(mode, args.iterations, pg_url_for(base_url, BENCH_DB), redis_url)
            finally:
                pg_admin(base_url, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        else:
            iterations = args.iterations if mode == "embedded" else max(10, args.iterations // 5)
            with tempfile.TemporaryDirectory(prefix="aimon_bench_approvals_") as folder:
                figures = child(mode, iterations, f"sqlite:///{folder}/bench.sqlite3", None)
        ok &= report(mode, figures)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
