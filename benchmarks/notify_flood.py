"""Answers in a burst with a signed webhook: the broker's queues and how long they take to
drain (P2: a burst never floods the queue).

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/notify_flood.py --before <rev>
    .venv/bin/python benchmarks/notify_flood.py --requests 1000 --threads 4 --before <rev> --after <rev>

Production's shape: a throwaway PostgreSQL database, Redis (`--redis`, a database that must
be empty, emptied again afterwards), a web node, one Celery worker (prefork,
`--worker-concurrency` processes, taking both queues as make prod's does) and Celery beat,
whose notification sweep runs every 10 s. An organisation's webhook, taking every event,
points at a receiver in this process. `--requests` requests are opened over HTTP, then each
is answered by the approver's click (an htmx POST over HTTP, as the inbox sends it), from
`--threads` clients. Every 0.25 s the broker's queues are read (LLEN of each queue's list).

Figures, for this working tree (or `--after REV`) and, with `--before REV`, for that
revision, each revision exported with `git archive`, one after the other in the same run:
the broker's deepest moment (messages waiting, all queues, and the default queue alone,
where request expiry and MCP syncs wait), the messages still queued 60 s after the last
answer, how long after the last answer the queues were empty for good and every message
owed had arrived, and how many arrived twice (the same webhook-id) or never (waited for
until nothing arrived for 30 s with the queues empty). The ratios compare the two.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _http
from benchmarks.notify_latency import node_up

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BENCH_DB = "aimon_bench_notify_flood"
PASSWORD = "flood-" + secrets.token_urlsafe(12)
# Each queue is a Redis list of its name; kombu keeps priorities 3, 6 and 9 beside it.
QUEUES = ("celery", "notifications")
PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")
SAMPLE_SECONDS = 0.25
AFTER_SECONDS = 60.0
QUIET_SECONDS = 30.0

# Run in the tree under test with its own manage.py (`shell -c`), so each tree's own code.
SETUP = """
import json
from aimon_admin.accounts.roles import Role
from aimon_admin.accounts.services import user_create
from aimon_admin.core.actors import Actor
from aimon_admin.notifications.services import webhook_create
from aimon_admin.runtimes.services import runtime_create, token_issue

actor = Actor.system("benchmark")
runtime = runtime_create(name="flood-agent", actor=actor)
_, token = token_issue(runtime=runtime, actor=actor, label="bench")
user_create(username="alice", password={password!r}, roles=[Role.APPROVER], actor=actor)
webhook_create(name="flood", url={url!r}, actor=actor)
print(json.dumps({{"token": token}}))
"""


class Receiver:
    """The webhook's endpoint: each message's type, request and webhook-id."""

    def __init__(self) -> None:
        self.got: Counter[tuple[str, str]] = Counter()
        self.ids: Counter[str] = Counter()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                with receiver.lock:
                    receiver.got[(body["type"], body["data"]["request"]["id"])] += 1
                    receiver.ids[self.headers["webhook-id"]] += 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset(self) -> None:
        with self.lock:
            self.got.clear()
            self.ids.clear()

    def total(self) -> int:
        with self.lock:
            return sum(self.ids.values())

    def received(self, ids: list[str]) -> int:
        """How many of the messages owed (requested and answered, each request) arrived."""
        with self.lock:
            return sum(
                1 for i in ids for kind in ("approval.requested", "approval.answered") if self.got[(kind, i)]
            )


class Depth(threading.Thread):
    """The broker's queues, sampled until stopped: (seconds since start, depth by queue)."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.started = time.monotonic()
        self.stopping = threading.Event()

    def now(self) -> dict[str, int]:
        return {q: sum(self.client.llen(q + suffix) for suffix in PRIORITY_SUFFIXES) for q in QUEUES}

    def run(self) -> None:
        while not self.stopping.is_set():
            self.samples.append((time.monotonic() - self.started, self.now()))
            self.stopping.wait(SAMPLE_SECONDS)

    def deepest(self, queue: str | None = None) -> int:
        return max((sum(d.values()) if queue is None else d[queue] for _, d in self.samples), default=0)


class Browser:
    """The approver signed in on the node: a kept-alive connection, the cookies, CSRF."""

    def __init__(self, port: int) -> None:
        self.conn = HTTPConnection("127.0.0.1", port, timeout=60)
        self.cookies: dict[str, str] = {}
        page = self._send("GET", "/accounts/login/")
        match = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert match, "no CSRF token on the sign-in page"
        form = {"username": "alice", "password": PASSWORD, "csrfmiddlewaretoken": match.group(1).decode()}
        self._send("POST", "/accounts/login/", urllib.parse.urlencode(form), expect=302)

    def _send(self, method: str, path: str, body: str | None = None, *, expect: int = 200) -> bytes:
        headers = {
            "Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items()),
            "Referer": f"http://127.0.0.1:{self.conn.port}/",
        }
        if body is not None:
            headers |= {
                "Content-Type": "application/x-www-form-urlencoded",
                "X-CSRFToken": self.cookies.get("csrftoken", ""),
                "HX-Request": "true",
            }
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

    def answer(self, request_id: str) -> None:
        form = urllib.parse.urlencode({"answer": "ALLOW_SESSION"})
        self._send("POST", f"/approvals/requests/{request_id}/answer/", form)


def in_threads(threads: int, items: list[Any], work: Any, make_client: Any) -> float:
    """Run `work(client, item)` for every item from `threads` clients; the seconds it took."""
    pending = iter(items)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            client = make_client()
            while True:
                with lock:
                    item = next(pending, None)
                if item is None:
                    return
                work(client, item)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    return time.monotonic() - started


def open_requests(port: int, token: str, count: int, threads: int) -> tuple[float, list[str]]:
    ids: list[str] = []
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def work(conn: HTTPConnection, n: int) -> None:
        body = {"skills": ["deploy"], "session_id": f"s-{n}", "principal": "alice", "timeout_seconds": 3600}
        conn.request("POST", "/api/v1/approval-requests", body=json.dumps(body), headers=headers)
        response = conn.getresponse()
        answer = json.loads(response.read())
        if response.status != 201:
            raise SystemExit(f"opening a request: {response.status} {answer}")
        ids.append(answer["id"])

    seconds = in_threads(
        threads, list(range(count)), work, lambda: HTTPConnection("127.0.0.1", port, timeout=60)
    )
    return seconds, ids


def start(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def export(rev: str, folder: Path) -> Path:
    """The revision's tree (git archive), to run as it was."""
    archive = folder / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", rev], cwd=ROOT, stdout=out, check=True)
    tree = folder / "tree"
    tree.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def measure(tree: Path, args: argparse.Namespace, receiver: Receiver, folder: Path) -> dict[str, Any]:
    """One burst on the code in `tree`: its figures."""
    client = redis.Redis.from_url(args.redis)
    if client.dbsize():
        raise SystemExit(f"{args.redis} holds keys: name an empty Redis database with --redis")
    receiver.reset()
    with _http.throwaway_pg(BENCH_DB) as database_url:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "AIMON_", "CELERY_"))},
            # The product's settings, pages rendered without collectstatic (benchmarks/settings.py).
            "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(48),
            "DJANGO_SECURE_COOKIES": "0",
            "DATABASE_URL": database_url,
            "REDIS_URL": args.redis,
            "CELERY_TASK_ALWAYS_EAGER": "0",
            "AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES": "1",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(tree),
        }
        subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v0"], cwd=tree, env=env, check=True)
        code = SETUP.format(password=PASSWORD, url=f"http://127.0.0.1:{receiver.port}/hook")
        done = subprocess.run(
            [PYTHON, "manage.py", "shell", "-c", code],
            cwd=tree,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        token = json.loads(done.stdout.strip().splitlines()[-1])["token"]
        port = _http.free_port()
        processes = [
            start(
                [PYTHON, "-m", "uvicorn", "aimon_admin.asgi:application", "--host", "127.0.0.1", "--port",
                 str(port), "--lifespan", "off", "--no-access-log", "--log-level", "warning"],
                tree, env, folder / "node.log",
            ),
            start(
                [PYTHON, "-m", "celery", "-A", "aimon_admin", "worker", "-P", "prefork", "-Q",
                 "celery,notifications", "-c", str(args.worker_concurrency), "--without-gossip",
                 "--without-mingle", "--without-heartbeat", "-l", "WARNING"],
                tree, env, folder / "worker.log",
            ),
            start(
                [PYTHON, "-m", "celery", "-A", "aimon_admin", "beat", "-l", "WARNING", "--schedule",
                 str(folder / "celerybeat-schedule")],
                tree, env, folder / "beat.log",
            ),
        ]  # fmt: skip
        depth = Depth(client)
        try:
            node_up(port)
            depth.start()
            opened_in, ids = open_requests(port, token, args.requests, args.threads)
            answered_in = in_threads(args.threads, ids, Browser.answer, lambda: Browser(port))
            last_answer = busy_at = heard_at = time.monotonic()
            all_in: float | None = None
            after: dict[str, int] | None = None
            heard = receiver.total()
            # Until the queues are empty and every message owed has arrived, or nothing has
            # for QUIET_SECONDS (the rest will not come: lost).
            while (now := time.monotonic()) - last_answer < args.drain_seconds:
                queued = depth.now()
                if after is None and now - last_answer >= AFTER_SECONDS:
                    after = queued
                if any(queued.values()):
                    busy_at = now
                if receiver.total() != heard:
                    heard, heard_at = receiver.total(), now
                if all_in is None and receiver.received(ids) == 2 * len(ids):
                    all_in = now - last_answer
                if not any(queued.values()) and (all_in is not None or now - heard_at >= QUIET_SECONDS):
                    break
                time.sleep(SAMPLE_SECONDS)
            emptied_in = busy_at - last_answer if not any(depth.now().values()) else None
            time.sleep(2)  # a message sent twice would have arrived by now
        finally:
            depth.stopping.set()
            for process in processes:
                os.killpg(process.pid, signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
            client.flushdb()  # found empty: only this run's keys
            client.close()
    with receiver.lock:
        twice = sum(times - 1 for times in receiver.ids.values())
    return {
        "opened_in_s": round(opened_in, 1),
        "answered_in_s": round(answered_in, 1),
        "deepest_queued": depth.deepest(),
        "deepest_default_queue": depth.deepest("celery"),
        # Emptied sooner: none left then.
        "queued_60s_after": sum(after.values())
        if after is not None
        else 0
        if emptied_in is not None
        else None,
        "queues_empty_s_after_last_answer": None if emptied_in is None else round(emptied_in, 1),
        "all_received_s_after_last_answer": None if all_in is None else round(all_in, 1),
        "messages_owed": 2 * len(ids),
        "received": receiver.received(ids),
        "never_received": 2 * len(ids) - receiver.received(ids),
        "received_twice": twice,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument(
        "--redis", default="redis://127.0.0.1:6379/13", help="an empty database, emptied again afterwards"
    )
    parser.add_argument("--drain-seconds", type=float, default=900.0)
    parser.add_argument("--worker-concurrency", type=int, default=2)
    parser.add_argument("--before", help="a git revision to measure first, as the baseline")
    parser.add_argument("--after", help="a git revision to measure instead of this working tree")
    args = parser.parse_args()

    receiver = Receiver()
    folder = Path(tempfile.mkdtemp(prefix="aimon-bench-flood-"))
    results: dict[str, Any] = {"requests": args.requests, "threads": args.threads}
    try:
        if args.before:
            (folder / "before").mkdir()
            tree = export(args.before, folder / "before")
            results["before"] = {"rev": args.before, **measure(tree, args, receiver, folder / "before")}
            print(json.dumps({"before": results["before"]}), flush=True)
        (folder / "after").mkdir()
        tree = export(args.after, folder / "after") if args.after else ROOT
        results["after"] = {
            "rev": args.after or "working tree",
            **measure(tree, args, receiver, folder / "after"),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    before, after = results.get("before"), results["after"]
    if before:
        results["ratios_after_over_before"] = {
            key: round(after[key] / before[key], 3) if before[key] and after[key] is not None else None
            for key in ("deepest_queued", "queues_empty_s_after_last_answer")
        }
    results["met"] = after["never_received"] == 0 and after["queues_empty_s_after_last_answer"] is not None
    print(json.dumps(results))
    return 0 if results["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
