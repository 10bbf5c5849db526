"""The open-model load generator of benchmarks/load.py: one process of it.

Requests leave on a schedule fixed before the run (evenly spaced or Poisson), whatever the
server does: a slow server shows as latency, never as a lower offered rate. Latency runs
from each request's *scheduled* time to the last byte of its response, so time spent
waiting for a free connection or behind a late dispatcher counts (no coordinated
omission). Raw HTTP/1.1 keep-alive connections on asyncio (uvloop when installed): a
connection carries one request at a time; when none is free a new one is opened, up to
`max_connections`, then requests queue for one, their clock running.

Every response is checked: status 200 and a JSON body exactly equal to the expected one.
Run as `python benchmarks/load_client.py` with a JSON job on stdin (load.py does that);
prints one JSON object: latencies (ms), counts, wrong answers and this process's CPU time.
`python benchmarks/load_client.py --self-test` checks the checker against a fake server
that fails 1 request in 50, with half the expectations wrong.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Case:
    """One request of the mix and the exact JSON body that must come back."""

    raw: bytes
    expected: Any


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    wrong: int = 0
    failures: int = 0  # no HTTP response at all (connection refused, reset, timeout)
    samples: list[str] = field(default_factory=list)  # a few bad answers, to show
    lag: list[float] = field(default_factory=list)  # dispatcher behind schedule, ms

    def note(self, text: str) -> None:
        if len(self.samples) < 5:
            self.samples.append(text)


def build_cases(host: str, port: int, cases: list[dict[str, Any]]) -> list[Case]:
    built = []
    for case in cases:
        body = case["body"].encode()
        head = (
            f"POST {case['path']} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {case['token']}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        built.append(Case(head + body, case["expected"]))
    return built


IDLE_LIMIT = 4.0  # seconds, under uvicorn's 5 s keep-alive timeout


class ConnectionClosedError(Exception):
    pass


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, keep the connection) of one HTTP/1.1 response."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise ConnectionClosedError("connection closed before a response") from exc
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length, chunked, keep = None, False, True
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
        elif name == "connection" and value.strip().lower() == "close":
            keep = False
    if length is not None:
        return status, await reader.readexactly(length), keep
    if chunked:
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return status, b"".join(parts), keep
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    return status, await reader.read(), False


class Pool:
    """Keep-alive connections, each carrying one request at a time."""

    def __init__(self, host: str, port: int, max_connections: int) -> None:
        self.host, self.port, self.max = host, port, max_connections
        self.idle: deque[tuple[tuple[asyncio.StreamReader, asyncio.StreamWriter], float]] = deque()
        self.waiters: deque[asyncio.Future] = deque()
        self.opened = 0
        self.peak = 0

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self.opened += 1
        self.peak = max(self.peak, self.opened)
        try:
            return await asyncio.open_connection(self.host, self.port)
        except OSError:
            self.opened -= 1
            raise

    async def get(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while self.idle:
            conn, returned = self.idle.popleft()  # oldest first: every connection stays warm
            if time.monotonic() - returned < IDLE_LIMIT and not conn[0].at_eof():
                return conn
            # The server closes a keep-alive connection idle for 5 s (uvicorn's default):
            # such a connection is replaced, as any HTTP client does, not counted as an error.
            conn[1].close()
            self.opened -= 1
        if self.opened < self.max:
            return await self.open()
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        return await waiter

    def put(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self.idle.append((conn, time.monotonic()))

    def drop(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        conn[1].close()
        self.opened -= 1
        # A request queued for a connection gets a fresh one instead of this one.
        if self.waiters and self.opened < self.max:
            waiter = self.waiters.popleft()
            task = asyncio.ensure_future(self.open())
            task.add_done_callback(
                lambda t: (
                    waiter.done()
                    or (
                        waiter.set_exception(t.exception())
                        if t.exception()
                        else waiter.set_result(t.result())
                    )
                )
            )


async def one(pool: Pool, case: Case, scheduled: float, tally: Tally, timeout: float) -> None:
    conn = None
    try:
        conn = await pool.get()
        reader, writer = conn
        writer.write(case.raw)
        status, body, keep = await asyncio.wait_for(read_response(reader), timeout)
    except (OSError, ConnectionClosedError, asyncio.IncompleteReadError, TimeoutError) as exc:
        tally.failures += 1
        tally.note(f"no response: {type(exc).__name__}: {exc}")
        if conn is not None:
            pool.drop(conn)
        return
    tally.latencies.append((time.monotonic() - scheduled) * 1000)
    tally.statuses[status] += 1
    if keep:
        pool.put(conn)
    else:
        pool.drop(conn)
    if status != 200:
        tally.note(f"HTTP {status}: {body[:300]!r}")
        return
    try:
        got = json.loads(body)
    except ValueError:
        got = body
    if got != case.expected:
        tally.wrong += 1
        tally.note(f"wrong answer: got {got!r}, expected {case.expected!r}")


async def run(job: dict[str, Any]) -> dict[str, Any]:
    cases = build_cases(job["host"], job["port"], job["cases"])
    pool = Pool(job["host"], job["port"], job["max_connections"])
    # Warm connections before the clock starts, so the first requests do not pay the
    # handshakes (and so several server workers get some each).
    warm = await asyncio.gather(*(pool.open() for _ in range(job["connections"])))
    for conn in warm:
        pool.put(conn)
    rng = random.Random(job["seed"])
    rate, poisson, timeout = job["rate"], job["poisson"], job["timeout"]
    loop = asyncio.get_running_loop()
    start = job["start_at"]  # time.monotonic() is one clock for every process on Linux
    end = start + job["seconds"]
    tally = Tally()
    tasks = set()
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    scheduled, sent, index = start, 0, rng.randrange(len(cases))
    while True:
        scheduled += rng.expovariate(rate) if poisson else 1 / rate
        if scheduled >= end:
            break
        delay = scheduled - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tally.lag.append(max(0.0, (time.monotonic() - scheduled) * 1000))
        index = (index + 1) % len(cases)
        task = loop.create_task(one(pool, cases[index], scheduled, tally, timeout))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        sent += 1
    if tasks:
        await asyncio.wait(tasks)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    finished = time.monotonic()
    for (_, writer), _ in pool.idle:
        writer.close()
    return {
        "sent": sent,
        "latencies": [round(x, 3) for x in tally.latencies],
        "statuses": {str(k): v for k, v in tally.statuses.items()},
        "wrong": tally.wrong,
        "failures": tally.failures,
        "samples": tally.samples,
        "lag_p99_ms": sorted(tally.lag)[int(0.99 * (len(tally.lag) - 1))] if tally.lag else 0.0,
        "cpu_seconds": (usage.ru_utime - usage_before.ru_utime) + (usage.ru_stime - usage_before.ru_stime),
        "elapsed": finished - start,
        "peak_connections": pool.peak,
    }


async def fake_server(port: int) -> None:
    """For --self-test: answers {"decision": "ALLOW"}, and every 50th request a 500."""
    served = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                await reader.readexactly(length)
                served += 1
                status, body = (
                    (b"500 Internal Server Error", b"oops")
                    if served % 50 == 0
                    else (b"200 OK", b'{"decision": "ALLOW"}')
                )
                writer.write(b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def self_test() -> None:
    """The checker must catch what it is there to catch: half the expectations are wrong,
    and the server fails 1 request in 50. Also shows what one process can offer."""
    import socket
    import subprocess

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--fake-server", str(port)])
    try:
        time.sleep(1)
        rate, seconds = 2000, 3
        job = {
            "host": "127.0.0.1",
            "port": port,
            "rate": rate,
            "seconds": seconds,
            "seed": 1,
            "start_at": time.monotonic() + 1,
            "poisson": True,
            "connections": 8,
            "max_connections": 64,
            "timeout": 5,
            "cases": [
                {"path": "/x", "token": "t", "body": "{}", "expected": {"decision": "ALLOW"}},
                {"path": "/x", "token": "t", "body": "{}", "expected": {"decision": "DENY"}},
            ],
        }
        out = asyncio.run(run(job))
    finally:
        server.terminate()
        server.wait()
    answered = sum(out["statuses"].values())
    errors = out["statuses"].get("500", 0)
    print(
        f"sent {out['sent']} at {rate}/s in one process ({out['cpu_seconds'] / seconds:.2f} cores), "
        f"answered {answered}, 500s {errors}, wrong {out['wrong']}"
    )
    assert out["failures"] == 0, out
    assert answered == out["sent"], out
    assert abs(errors - answered / 50) <= 2, errors
    # Half the 200s had an expectation the fake server never meets.
    assert abs(out["wrong"] - (answered - errors) / 2) <= 0.05 * answered, out["wrong"]
    print("self-test passed")


def main() -> None:
    if sys.argv[1:2] == ["--self-test"]:
        self_test()
        return
    if sys.argv[1:2] == ["--fake-server"]:
        asyncio.run(fake_server(int(sys.argv[2])))
        return
    job = json.loads(sys.stdin.read())
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    out = json.dumps(runner(run(job)))
    if job.get("report"):  # load.py: a file of its own, read once this process has exited
        Path(job["report"]).write_text(out)
        return
    # The event loop may leave standard output non-blocking: the report is written blocking.
    os.set_blocking(sys.stdout.fileno(), True)
    sys.stdout.write(out + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
