"""Which server serves decisions: uvicorn (ASGI), granian (WSGI), gunicorn (WSGI), side by side.

Run by hand (never by CI), from the project root; needs `wrk` (Debian: apt-get install -y wrk)
and, for the `topology` row, nginx (apt-get install -y nginx):

    .venv/bin/python benchmarks/servers.py                    # every server, 1 and 2 workers
    .venv/bin/python benchmarks/servers.py --seconds 4 --only granian-2 --only topology

One throwaway PostgreSQL database (`aimon_bench_servers`, created and dropped here) seeded as
benchmarks/skill_decisions.py seeds it (a runtime, 1,000 rules, granted sessions). Then, in
one run, each server in turn on 127.0.0.1 with benchmarks.settings: `wrk -t1 -cN` against
`/bench/baseline` (the same token lookup as a decision, a small JSON body: the bare endpoint)
and `POST /api/v1/skill-decisions` (3 skills answered by three layers), alternating, every
answer checked 200. Printed per server and path: requests/s, p99, and server CPU
milliseconds per request (the server's processes, nginx's when it is in front, and the
PostgreSQL backends serving it, from /proc); then each server's decisions as a ratio of the
same run's uvicorn-1 decisions, and of its own baseline. The machine is shared: read the
ratios, not the absolute figures. `topology` is what `make prod` runs: nginx in front of the
WSGI server for request/response paths and uvicorn for the long-polls (scripts/prod.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _http, skill_decisions

BENCH_DB = "aimon_bench_servers"
BASELINE = "/bench/baseline"
BASELINE_PREPARED = "/bench/baseline-prepared"
DECISIONS = "/api/v1/skill-decisions"
BIN = Path(sys.executable).parent


def uvicorn_argv(port: int, workers: int) -> list[str]:
    return [
        sys.executable, "-m", "uvicorn", "aimon_admin.asgi:application", "--host", "127.0.0.1",
        "--port", str(port), "--workers", str(workers), "--lifespan", "off", "--no-access-log",
        "--log-level", "warning",
    ]  # fmt: skip


def granian_argv(port: int, workers: int) -> list[str]:
    return [
        str(BIN / "granian"), "--interface", "wsgi", "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(workers), "--no-ws", "--log-level", "warning", "aimon_admin.wsgi:application",
    ]  # fmt: skip


def gunicorn_argv(port: int, workers: int, threads: int = 1) -> list[str]:
    return [
        str(BIN / "gunicorn"), "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
        "--threads", str(threads), "--log-level", "warning", "aimon_admin.wsgi:application",
    ]  # fmt: skip


SERVERS: dict[str, Callable[[int], list[str]]] = {
    "uvicorn-1": lambda port: uvicorn_argv(port, 1),
    "uvicorn-2": lambda port: uvicorn_argv(port, 2),
    "granian-1": lambda port: granian_argv(port, 1),
    "granian-2": lambda port: granian_argv(port, 2),
    "granian-2x2": lambda port: [
        *granian_argv(port, 2)[:-1],
        "--blocking-threads",
        "2",
        granian_argv(port, 2)[-1],
    ],
    "gunicorn-sync-1": lambda port: gunicorn_argv(port, 1),
    "gunicorn-sync-2": lambda port: gunicorn_argv(port, 2),
    "gunicorn-gthread-2x4": lambda port: gunicorn_argv(port, 2, 4),
}
TOPOLOGY = "topology"


@dataclass
class Figure:
    rate: float
    p99_ms: float
    cpu_ms: float  # server CPU per request


def _cpu(sessions: list[int], database: str) -> float:
    return sum(
        _http.server_cpu_seconds(_http.Server(port=0, session=s, database=database if i == 0 else None))
        for i, s in enumerate(sessions)
    )


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def wrk(port: int, path: str, token: str, seconds: int, connections: int) -> tuple[int, float, float]:
    """(requests, seconds, p99 ms) of one wrk run; every answer must be 200."""
    lua = _http.WRK_SCRIPT % (json.dumps(json.dumps(skill_decisions.BODY)), token)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua)
    try:
        out = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", script.name,
             f"http://127.0.0.1:{port}{path}"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    finally:
        os.unlink(script.name)
    bad = re.search(r"non200=(\d+)", out)
    if bad and int(bad.group(1)):
        raise SystemExit(f"{path}: {bad.group(1)} responses were not 200\n{out}")
    found = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m)\b", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    if found is None or p99 is None:
        raise SystemExit(f"unexpected wrk output:\n{out}")
    elapsed = float(found.group(2)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[found.group(3)]
    return int(found.group(1)), elapsed, _ms(p99.group(1), p99.group(2))


@contextmanager
def started(argvs: list[list[str]], env: dict[str, str]) -> Iterator[list[int]]:
    """Each argv in a session of its own until the block ends; yields the sessions."""
    processes = [subprocess.Popen(argv, cwd=_http.ROOT, env=env, start_new_session=True) for argv in argvs]
    try:
        yield [p.pid for p in processes]
    finally:
        for process in processes:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def prod_script():  # type: ignore[no-untyped-def]
    """scripts/prod.py as a module: the topology is built by its own code."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("aimon_prod_script", _http.ROOT / "scripts" / "prod.py")
    assert spec is not None
    assert spec.loader is not None
    prod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = prod
    spec.loader.exec_module(prod)
    return prod


def topology_env(env: dict[str, str], port: int, workers: int, threads: int, folder: Path) -> dict[str, str]:
    folder.chmod(0o755)  # started as root, nginx's workers (user nobody) must reach the sockets in it
    prod_env = dict(
        env,
        AIMON_WEB_PORT=str(port),
        AIMON_WEB_WORKERS=str(workers),
        AIMON_WEB_THREADS=str(threads),
        AIMON_WAIT_WORKERS="1",
        AIMON_RUN_DIR=str(folder / "run"),
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        REDIS_URL=env.get("REDIS_URL") or os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9"),
    )
    prod_env.pop("CELERY_TASK_ALWAYS_EAGER", None)
    prod_env.setdefault("DJANGO_SECRET_KEY", "benchmark-only-secret-key-not-for-production-0123456789")
    if not prod_env.get("AIMON_SECRETS_KEY_FILE"):
        prod_env.setdefault("AIMON_SECRETS_KEY", "YmVuY2htYXJrLW9ubHktc2VjcmV0cy1rZXktbm90LTE=")
    return prod_env


@contextmanager
def topology(
    env: dict[str, str], port: int, workers: int, threads: int, folder: Path, app: str | None = None
) -> Iterator[list[int]]:
    """What `make prod` serves with (scripts/prod.py's own commands and nginx configuration):
    nginx on `port`, granian (WSGI) and uvicorn (ASGI) behind it; no Celery. `app`: another
    WSGI application for granian to serve (`module:name`), as the floor's bare ones."""
    prod = prod_script()
    config = prod.config_from(topology_env(env, port, workers, threads, folder))
    argv = prod.commands(config)
    if app is not None:
        argv["web"][-1] = app
    prod.write_nginx_conf(config)
    with started([argv["web"], argv["wait"]], config.env) as servers:
        deadline = time.monotonic() + 60
        while not (prod._accepts(config.web_socket) and prod._accepts(config.wait_socket)):
            if time.monotonic() > deadline:
                raise SystemExit("the servers behind nginx did not open their sockets")
            time.sleep(0.1)
        with started([argv["proxy"]], config.env) as proxy:
            yield servers + proxy


def topology_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of a benchmark that measures rounds of wrk against make prod's topology."""
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="granian's workers")
    parser.add_argument("--threads", type=int, default=2, help="threads per granian worker")
    parser.set_defaults(conn_max_age=0)  # the pool, as production


def measure(args: argparse.Namespace, env: dict[str, str], token: str, name: str) -> dict[str, Figure]:
    port = _http.free_port()
    database = urllib.parse.urlsplit(env["DATABASE_URL"]).path.lstrip("/")
    with tempfile.TemporaryDirectory(prefix="aimon_bench_servers_") as folder:
        context = (
            topology(env, port, args.topology_workers, args.topology_threads, Path(folder))
            if name == TOPOLOGY
            else started([SERVERS[name](port)], env)
        )
        with context as sessions:
            _http.wait_until_up(port, token, timeout=60)
            skill_decisions.check_answer(port, DECISIONS, token, json.dumps(skill_decisions.BODY))
            for path in (BASELINE, DECISIONS):
                wrk(port, path, token, 2, args.connections)
            rounds: dict[str, list[Figure]] = {BASELINE: [], DECISIONS: []}
            for _ in range(args.rounds):
                for path in (BASELINE, DECISIONS):
                    before = _cpu(sessions, database)
                    requests, elapsed, p99 = wrk(port, path, token, args.seconds, args.connections)
                    used = _cpu(sessions, database) - before
                    rounds[path].append(Figure(requests / elapsed, p99, used * 1000 / requests))
    return {
        path: Figure(
            statistics.median(f.rate for f in figures),
            statistics.median(f.p99_ms for f in figures),
            statistics.median(f.cpu_ms for f in figures),
        )
        for path, figures in rounds.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--topology-workers", type=int, default=2, help="WSGI workers in the topology row")
    parser.add_argument("--topology-threads", type=int, default=2, help="threads per WSGI worker there")
    parser.add_argument("--only", action="append", choices=[*SERVERS, TOPOLOGY], help="repeatable")
    args = parser.parse_args()
    names = args.only or [*SERVERS, TOPOLOGY]
    args.conn_max_age = 0
    results: dict[str, dict[str, Figure]] = {}
    with _http.throwaway_pg(BENCH_DB) as url:
        env = _http.server_env(url, args)
        token = _http.child_json(skill_decisions.__file__, "--seed", env)["token"]
        for name in names:
            binary = SERVERS[name](0)[0] if name in SERVERS else "nginx"
            if not (shutil.which(binary) or Path(binary).exists()):
                print(f"{name:22} skipped: {Path(binary).name} is not installed", flush=True)
                continue
            results[name] = measure(args, env, token, name)
            base, real = results[name][BASELINE], results[name][DECISIONS]
            print(
                f"{name:22} baseline {base.rate:7,.0f}/s p99 {base.p99_ms:6.1f} ms "
                f"{base.cpu_ms:5.2f} ms CPU/req | decisions {real.rate:7,.0f}/s p99 {real.p99_ms:6.1f} ms "
                f"{real.cpu_ms:5.2f} ms CPU/req | ratio to baseline {real.rate / base.rate:.2f}",
                flush=True,
            )
    reference = results.get("uvicorn-1")
    if reference:
        print(
            f"\ndecisions/s as a multiple of uvicorn-1's, same run ({args.connections} connections, wrk -t1):"
        )
        for name, figures in results.items():
            print(f"  {name:22} x{figures[DECISIONS].rate / reference[DECISIONS].rate:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
