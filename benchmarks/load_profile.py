"""A one-worker uvicorn with an in-process sampling profiler, for `load.py --profile RATE`.

py-spy is not installed, `perf` sees only the interpreter's C frames on Python 3.11, and
yappi slows this server sixfold (and reports internal errors under uvloop), which distorts
the shares it measures. So: a thread that samples every other thread's Python stack every
`--interval` ms (`sys._current_frames`), as py-spy does from outside, and the CPU time of
each thread from /proc (the event loop's thread against the threads asgiref runs the sync
views in). A sample whose innermost frame is waiting (the event loop's select, an idle
executor thread) is counted as idle and left out. On SIGTERM the server stops and the
profile is written: CPU by thread, busy samples by package (innermost frame), then the
functions most often innermost ("own") and most often anywhere on the stack ("total").
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import types
from collections import Counter
from pathlib import Path
from typing import Any

PACKAGES = (
    "aimon_admin",
    "benchmarks",
    "django",
    "rest_framework",
    "asgiref",
    "uvicorn",
    "httptools",
    "h11",
    "uvloop",
    "psycopg_pool",
    "psycopg",
    "redis",
    "asyncio",
    "concurrent",
    "threading",
    "json",
    "logging",
)
# Innermost frames that mean "waiting", not working.
IDLE = {
    ("threading.py", "wait"),
    ("queue.py", "get"),
    ("thread.py", "_worker"),
    ("selectors.py", "select"),
    ("base_events.py", "_run_once"),
    ("base_events.py", "run_forever"),
    ("base_events.py", "run_until_complete"),
    ("runners.py", "run"),
    ("__init__.py", "run"),  # uvloop.run: the C loop is below it
    ("pool.py", "run"),  # psycopg_pool's scheduler and workers waiting for work
    ("sched.py", "run"),
    ("pool.py", "worker"),
    ("threading.py", "_wait_for_tstate_lock"),
}
# Innermost frames that mean a thread is blocked on a PostgreSQL round trip (no CPU).
DB_WAIT = {("connection.py", "wait"), ("waiting.py", "wait_c"), ("waiting.py", "wait")}


def package_of(path: str) -> str:
    parts = Path(path).parts
    for name in PACKAGES:
        if name in parts:
            return name
    return "other: " + (parts[-2] if len(parts) > 1 else path)


class Sampler(threading.Thread):
    def __init__(self, interval: float) -> None:
        super().__init__(name="load-profile-sampler", daemon=True)
        self.interval = interval
        self.own: Counter[tuple[str, int, str]] = Counter()
        self.total: Counter[tuple[str, int, str]] = Counter()
        self.cpu_total: Counter[tuple[str, int, str]] = Counter()
        self.packages: Counter[str] = Counter()
        self.threads: Counter[str] = Counter()
        self.busy = self.idle = self.db_wait = 0
        self.running = True

    def run(self) -> None:
        me = threading.get_ident()
        while self.running:
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                code = frame.f_code
                leaf = (Path(code.co_filename).name, code.co_name)
                if leaf in IDLE:
                    self.idle += 1
                    continue
                self.busy += 1
                waiting = leaf in DB_WAIT
                if waiting:
                    self.db_wait += 1
                thread = names.get(ident, "?")
                self.threads["event loop" if thread == "MainThread" else "sync views (asgiref threads)"] += 1
                self.packages[package_of(code.co_filename)] += 1
                self.own[(code.co_filename, code.co_firstlineno, code.co_name)] += 1
                seen = set()
                while isinstance(frame, types.FrameType):
                    code = frame.f_code
                    key = (code.co_filename, code.co_firstlineno, code.co_name)
                    if key not in seen:
                        seen.add(key)
                        self.total[key] += 1
                        if not waiting:
                            self.cpu_total[key] += 1
                    frame = frame.f_back
            time.sleep(self.interval)


def thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's threads, by name as the kernel knows it."""
    tick = os.sysconf("SC_CLK_TCK")
    out: Counter[str] = Counter()
    for stat in Path("/proc/self/task").glob("*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        out[name] += (int(fields[11]) + int(fields[12])) / tick
    return dict(out)


def write(sampler: Sampler, cpu: dict[str, float], out: Path) -> None:
    busy = max(1, sampler.busy)
    lines = ["CPU seconds by kernel thread name (the event loop is the process's own name):"]
    lines += [f"  {seconds:8.2f} s  {name}" for name, seconds in sorted(cpu.items(), key=lambda kv: -kv[1])]
    lines.append(f"\n{sampler.busy} busy samples ({sampler.idle} idle ones left out), by thread:")
    lines += [f"  {n / busy:6.1%}  {name}" for name, n in sampler.threads.most_common()]
    lines.append(f"  of which {sampler.db_wait / busy:.1%} blocked on a PostgreSQL round trip (psycopg wait)")
    lines.append("\nbusy samples by package of the innermost frame:")
    lines += [f"  {n / busy:6.1%}  {name}" for name, n in sampler.packages.most_common(20)]
    working = max(1, sampler.busy - sampler.db_wait)
    tables = (
        ("own (innermost frame), share of busy samples", sampler.own, busy),
        ("total (anywhere on the stack), share of busy samples", sampler.total, busy),
        ("total, share of working samples (busy, not blocked on PostgreSQL)", sampler.cpu_total, working),
    )
    for title, counter, base in tables:
        lines.append(f"\nfunctions, {title}:")
        for (path, line, name), n in counter.most_common(70):
            where = f"{Path(path).parent.name}/{Path(path).name}:{line}"
            lines.append(f"  {n / base:6.1%}  {name}  ({where})")
    out.write_text("\n".join(lines) + "\n")


def write_yappi(stats: Any, out: Path) -> None:
    """Own CPU time by package, then functions by total CPU time (callees included)."""
    by_package: Counter[str] = Counter()
    total = 0.0
    for stat in stats:
        by_package[package_of(stat.module)] += stat.tsub
        total += stat.tsub
    total = total or 1.0
    lines = [f"yappi, CPU clock: own CPU time by package (total {total:.2f} s):"]
    lines += [f"  {t / total:6.1%}  {name}" for name, t in by_package.most_common(25)]
    lines.append("\nfunctions by total CPU time (callees included):")
    for stat in sorted(stats, key=lambda s: -s.ttot)[:90]:
        where = f"{Path(stat.module).parent.name}/{Path(stat.module).name}:{stat.lineno}"
        lines.append(f"  {stat.ttot / total:6.1%} {stat.ncall:8d} calls  {stat.name}  ({where})")
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--loop", default="uvloop")
    parser.add_argument("--http", default="httptools")
    parser.add_argument("--interval", type=float, default=2.0, help="ms between samples")
    parser.add_argument("--out", required=True)
    parser.add_argument("--yappi", action="store_true", help="also yappi, CPU clock (slows the server)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import uvicorn

    sampler = Sampler(args.interval / 1000)
    out = Path(args.out)
    if args.yappi:
        import yappi

        yappi.set_clock_type("cpu")
        yappi.start(builtins=False, profile_threads=True)

    def finish(*_: object) -> None:
        sampler.running = False
        write(sampler, thread_cpu(), out)
        if args.yappi:
            yappi.stop()
            write_yappi(yappi.get_func_stats(), out.with_suffix(".yappi.txt"))
        print(f"profile written to {out}", file=sys.stderr)
        os._exit(0)

    # uvicorn shuts down on SIGTERM, then raises it again with the handler it found: this one.
    signal.signal(signal.SIGTERM, finish)
    if not args.yappi:
        sampler.start()
    uvicorn.run(
        "aimon_admin.asgi:application",
        host="127.0.0.1",
        port=args.port,
        loop=args.loop,
        http=args.http,
        lifespan="off",
        access_log=False,
        log_level="warning",
    )
    finish()


if __name__ == "__main__":
    main()
