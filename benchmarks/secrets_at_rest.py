"""Secrets at rest: what encryption costs the two paths that read stored secrets.

Run by hand (never by CI), from the project root:

    git -C . worktree add /tmp/secrets-before <commit before encryption> --detach
    .venv/bin/python benchmarks/secrets_at_rest.py --compare-root /tmp/secrets-before
    git -C . worktree remove --force /tmp/secrets-before

Each root (this checkout and the one compared against) is run in a child process of its own,
on a throwaway SQLite database, rounds alternating between them. A round times, per iteration:

* send: a webhook's test message through the real delivery path (`channel_test`, then
  `delivery_send`: the channel read from the database, its address and signing secret,
  the signed body sent to a receiver in the child and answered 200);
* sync config: what an MCP sync reads before it connects (the server's row: its env,
  headers and URL, as `fetch_tool_listing` copies them out).

It prints each root's median CPU time per iteration (the child's, the receiver's thread
included: on a shared machine the wall clock mostly measures the neighbours) and the ratio
baseline / this checkout (≥ 0.95: no measurable slowdown).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import django
django.setup()
from django.core.management import call_command
call_command("migrate", interactive=False, verbosity=0)
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import services as notify
from aimon_admin.registry import services
from aimon_admin.registry.models import McpServer

class Ok(BaseHTTPRequestHandler):
    def log_message(self, *args):
        return
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
threading.Thread(target=server.serve_forever, daemon=True).start()
actor = Actor.system("bench")
address = f"http://127.0.0.1:{server.server_address[1]}/hook"
hook, _ = notify.webhook_create(name="bench", url=address, actor=actor)
mcp = services.mcp_server_create(
    name="bench", transport="STREAMABLE_HTTP", url="https://mcp.example.com/mcp?key=abcdef0123456789",
    headers={"Authorization": "Bearer " + "x" * 40, "X-Api-Key": "y" * 32}, actor=actor,
)
iterations = int(sys.argv[1])

def send():
    delivery = notify.channel_test(channel=hook, actor=actor)  # sent on commit: tasks run eagerly
    notify.delivery_send(delivery_id=delivery.pk)  # (None: already sent)
    delivery.refresh_from_db()
    assert delivery.status == "SENT", delivery.last_error

def config():
    row = McpServer.objects.get(pk=mcp.pk)
    env = {str(k): str(v) for k, v in row.env.items()}
    headers = {str(k): str(v) for k, v in row.headers.items()}
    assert headers and row.url and env == {}

out = {}
for name, step in (("send", send), ("sync config", config)):
    step()
    started = time.process_time()
    for _ in range(iterations):
        step()
    out[name] = (time.process_time() - started) / iterations * 1000
print(json.dumps(out))
"""


def run_child(root: Path, iterations: int) -> dict[str, float]:
    folder = tempfile.mkdtemp(prefix="aimon-bench-secrets-")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_", "DJANGO_", "AIMON_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="aimon_admin.settings.test",
        DATABASE_URL=f"sqlite:///{folder}/bench.sqlite3",
        CELERY_TASK_ALWAYS_EAGER="1",
        PYTHONPATH=str(root),
    )
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(iterations)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    if result.returncode != 0:
        raise SystemExit(f"{root}: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--compare-root", type=Path, required=True, help="a checkout without encryption")
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    runs: dict[str, dict[str, list[float]]] = {"now": {}, "before": {}}
    for number in range(args.rounds):
        order = (("now", ROOT), ("before", args.compare_root))
        for label, root in order if number % 2 == 0 else reversed(order):
            for name, ms in run_child(root, args.iterations).items():
                runs[label].setdefault(name, []).append(ms)
    for name in runs["now"]:
        now, before = statistics.median(runs["now"][name]), statistics.median(runs["before"][name])
        pairs = [b / n for n, b in zip(runs["now"][name], runs["before"][name], strict=True)]
        print(
            f"{name}: now {now:.3f} ms, before {before:.3f} ms CPU per iteration (medians of {args.rounds}); "
            f"before / now {before / now:.3f} (rounds {min(pairs):.3f}-{max(pairs):.3f})"
        )


if __name__ == "__main__":
    main()
