"""Does the runtime API's lean stack pay? (core.middleware.RuntimeApiStack)

Run by hand (never by CI), from the project root; needs PostgreSQL:

    .venv/bin/python benchmarks/api_lean_stack.py [--requests 1000] [--rounds 5]

A throwaway PostgreSQL database with a runtime, its token and an MCP server's tools (as
benchmarks/gateway.py sets them up), then two of Django's WSGI handlers in this process (what
granian calls in make prod, with no server or network in between): one built from
the settings as they are (the API takes its lean stack, RUNTIME_API_MIDDLEWARE), one with no
RUNTIME_API_PREFIXES (every request takes MIDDLEWARE, the whole chain). CPU per request
(`time.process_time`; PostgreSQL's backend is another process) of the bare endpoint
(`/bench/baseline`, the same token lookup) and a tool decision through each, in alternating
rounds; the medians and their ratios. Prints figures; asserts nothing but the answers.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _http, gateway  # noqa: E402
from benchmarks.decision_profile import _environ  # noqa: E402

BENCH_DB = "aimon_bench_lean_stack"
DECISION = json.dumps(
    {
        "tool": "read_note",
        "server": "notes",
        "arguments": {"note": "x"},
        "session_id": "s1",
        "principal": "alice",
    }
).encode()


def handlers() -> dict[str, object]:
    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler

    lean = WSGIHandler()
    product = settings.RUNTIME_API_PREFIXES
    settings.RUNTIME_API_PREFIXES = ()
    try:
        whole = WSGIHandler()
    finally:
        settings.RUNTIME_API_PREFIXES = product
    return {"lean stack": lean, "whole chain": whole}


def measure(token: str, requests: int, rounds: int) -> None:
    def call(handler: object, path: str, body: bytes | None) -> bytes:
        environ = _environ(path, token, body)
        environ["wsgi.input"] = io.BytesIO(body or b"")
        status: list[str] = []
        out = b"".join(handler(environ, lambda s, h, *a: status.append(s)))  # type: ignore[operator]
        if not status[0].startswith("200"):
            raise SystemExit(f"{path} answered {status[0]}: {out[:200]!r}")
        return out

    targets = {}
    for name, handler in handlers().items():
        targets[f"bare endpoint, {name}"] = (handler, "/bench/baseline", None)
        targets[f"tool decision, {name}"] = (handler, "/api/v1/tool-decisions", DECISION)
    for handler, path, body in targets.values():
        if body is not None and json.loads(call(handler, path, body))["decision"] != "ALLOW":
            raise SystemExit("the tool decision was not ALLOW")
    for _ in range(300):  # warm: caches, prepared statements, the pool
        for target in targets.values():
            call(*target)
    cpu: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, target in targets.items():
            start = time.process_time()
            for _ in range(requests):
                call(*target)
            cpu[name].append((time.process_time() - start) / requests * 1000)
    medians = {name: statistics.median(values) for name, values in cpu.items()}
    for name, values in cpu.items():
        rounds_text = ", ".join(f"{value:.3f}" for value in values)
        print(f"{name:32} {medians[name]:.3f} ms CPU per request (rounds {rounds_text})")
    for what in ("bare endpoint", "tool decision"):
        ratio = medians[f"{what}, lean stack"] / medians[f"{what}, whole chain"]
        print(f"{what}: lean stack / whole chain = {ratio:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database", default=BENCH_DB, help="throwaway PostgreSQL database")
    args = parser.parse_args()
    os.environ.update(DJANGO_SETTINGS_MODULE="benchmarks.settings", PYTHONPATH=str(ROOT))
    with (
        tempfile.TemporaryDirectory(prefix="aimon_bench_lean_stack_") as name,
        _http.throwaway_pg(args.database) as url,
    ):
        os.environ.update(DATABASE_URL=url, CELERY_TASK_ALWAYS_EAGER="1")
        os.environ.pop("REDIS_URL", None)
        token, _ = gateway.setup(Path(name) / "calls.log")
        measure(token, args.requests, args.rounds)
        from django.db import connections

        connections.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
