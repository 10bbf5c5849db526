"""Outages and deaths, timed: what a runtime and a person see while PostgreSQL or Redis is
down, and how soon a killed child of `make prod` serves again.

Run by hand (never by CI), from the project root; needs PostgreSQL's server binaries
(/usr/lib/postgresql/*/bin), redis-server and, for the restarts, nginx:

    .venv/bin/python benchmarks/outages.py                 # all three parts
    .venv/bin/python benchmarks/outages.py --only postgres  # or redis, restarts

Everything runs on servers it starts itself (the fault tests' private PostgreSQL and Redis,
tests/faults/conftest.py), never on the machine's own. Each part prints its figures beside a
baseline from the same run:

* postgres: twenty skill decisions sent at once, PostgreSQL up (the baseline) and then down
  after the first 503 (5 rounds): p50 and p99 of their answers; then how long after
  PostgreSQL's return the node decides again.
* redis: opening a request and clicking its answer, 20 of each with Redis up (the baseline)
  and then with Redis killed: p50 and p99, and the ratios.
* restarts: `make prod` (scripts/prod.py) on the private servers; its worker's process group
  killed: time until a task sent then has run; its web server's group killed: time until a
  decision through nginx is answered 200 again, and what nginx answered meanwhile; the
  other children's pids before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import django
import httpx2 as httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# The fault tests' machinery imports the test suite's conftest, which needs Django set up; the
# product itself runs in the subprocesses, on their own environment.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.test")
django.setup()

from tests.faults import conftest as faults  # noqa: E402
from tests.faults.clients import Person, Recorder, Runtime  # noqa: E402
from tests.faults.product import PASSWORD  # noqa: E402
from tests.ports import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONCURRENT = 20


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] if ordered else float("nan")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def servers(base: Path) -> tuple[faults.PrivatePostgres, faults.PrivateRedis, faults.Product]:
    bindir = faults._postgres_bindir()
    redis_binary = shutil.which("redis-server")
    if bindir is None or redis_binary is None:
        raise SystemExit("needs PostgreSQL's server binaries and redis-server")
    postgres = faults.PrivatePostgres(bindir, base)
    postgres.init()
    postgres.start()
    redis = faults.PrivateRedis(redis_binary)
    redis.start()
    with postgres.connect("postgres") as admin:
        admin.execute(f"CREATE DATABASE {faults.DATABASE}")
    product = faults.Product(postgres, redis)
    migrated = product.manage("migrate", "--noinput", "-v", "0")
    if migrated.returncode != 0:
        raise SystemExit(f"migrate failed:\n{migrated.stdout}\n{migrated.stderr}")
    return postgres, redis, product


def start_node(product: faults.Product, base: Path) -> faults.Node:
    port = free_port()
    process = faults.Process(
        [str(faults.BIN / "uvicorn"), "aimon_admin.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1", "--log-level", "warning", "--no-access-log"],
        product.env(),
        base / f"node-{port}.log",
    )  # fmt: skip
    return faults.Node(process, port).wait_ready()


def decide_at_once(url: str, token: str) -> list[tuple[int, float]]:
    results: list[tuple[int, float]] = []
    lock = threading.Lock()
    go = threading.Barrier(CONCURRENT)

    def one() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as client:
            go.wait()
            started = time.monotonic()
            response = client.post(
                "/api/v1/skill-decisions", json={"skills": ["deploy"], "session_id": "s-1"}
            )
            with lock:
                results.append((response.status_code, time.monotonic() - started))

    threads = [threading.Thread(target=one) for _ in range(CONCURRENT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def part_postgres(postgres: faults.PrivatePostgres, product: faults.Product, base: Path) -> None:
    node = start_node(product, base)
    try:
        who = product.run("people", tag="bench-pg")
        up = []
        for _ in range(5):
            up += decide_at_once(node.url, who["token"])
        assert {status for status, _ in up} == {200}, up
        postgres.stop()
        started = time.monotonic()
        first = httpx.post(
            f"{node.url}/api/v1/skill-decisions",
            json={"skills": ["deploy"], "session_id": "s-1"},
            headers={"Authorization": f"Bearer {who['token']}"},
            timeout=120,
        )
        first_in = time.monotonic() - started
        down = []
        for _ in range(5):
            down += decide_at_once(node.url, who["token"])
        statuses = {status for status, _ in down} | {first.status_code}
        postgres.start()
        returned = time.monotonic()
        while True:
            response = httpx.post(
                f"{node.url}/api/v1/skill-decisions",
                json={"skills": ["deploy"], "session_id": "s-1"},
                headers={"Authorization": f"Bearer {who['token']}"},
                timeout=120,
            )
            if response.status_code == 200:
                break
            time.sleep(0.02)
        recovered_in = time.monotonic() - returned
    finally:
        node.process.stop()
    up_times = [t for _, t in up]
    down_times = [t for _, t in down]
    print("\n== PostgreSQL down: 20 decisions at once, 5 rounds ==")
    print(f"up (baseline): p50 {ms(percentile(up_times, 50))}, p99 {ms(percentile(up_times, 99))}")
    print(f"down: the first 503 after {ms(first_in)} (the pool's timeout: {faults.POOL_TIMEOUT_SECONDS} s)")
    print(
        f"down, after it: statuses {sorted(statuses)}, p50 {ms(percentile(down_times, 50))}, "
        f"p99 {ms(percentile(down_times, 99))}, max {ms(max(down_times))}"
    )
    print(f"back: decides again {ms(recovered_in)} after PostgreSQL's return")


def part_redis(redis: faults.PrivateRedis, product: faults.Product, base: Path) -> None:
    node = start_node(product, base)
    try:
        who = product.run("people", tag="bench-redis")
        seen = Recorder()
        runtime = Runtime(node.url, who["token"], seen)
        alice = Person(node.url, seen)
        alice.sign_in(who["approver"], PASSWORD)

        def sample(label: str) -> tuple[float, float]:
            started = time.monotonic()
            opened = runtime.open_request([label], f"s-{label}", who["approver"])
            opened_in = time.monotonic() - started
            started = time.monotonic()
            alice.answer(opened["id"], "ALLOW_SESSION")
            return opened_in, time.monotonic() - started

        sample("warm")
        up = [sample(f"up-{n}") for n in range(20)]
        redis.stop()
        down = [sample(f"down-{n}") for n in range(20)]
        redis.start()
    finally:
        node.process.stop()
    print("\n== Redis down: opening a request and answering it, 20 each ==")
    for which, name in ((0, "open"), (1, "click")):
        normal = [s[which] for s in up]
        outage = [s[which] for s in down]
        print(
            f"{name}: up p50 {ms(percentile(normal, 50))} p99 {ms(percentile(normal, 99))}; "
            f"down p50 {ms(percentile(outage, 50))} p99 {ms(percentile(outage, 99))}; "
            f"ratio p50 {percentile(outage, 50) / percentile(normal, 50):.2f}, "
            f"p99 {percentile(outage, 99) / percentile(normal, 99):.2f}"
        )
    print(f"server errors: {len(seen.server_errors())}")


def _children(session: int) -> dict[str, int]:
    from tests.production.helpers import session_members
    from tests.production.test_launch import CHILD_MARKS

    found = {}
    for pid, command in session_members(session):
        if os.getpgid(pid) != pid:
            continue
        for name, marks in CHILD_MARKS.items():
            if all(mark in command for mark in marks):
                found[name] = pid
    return found


def part_restarts(product: faults.Product, base: Path) -> None:
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        raise SystemExit("the restarts need nginx (apt-get install -y nginx)")
    port = free_port()
    run_dir = Path(tempfile.mkdtemp(prefix="aimon-bench-prod-", dir="/tmp"))
    run_dir.chmod(0o755)
    env = {
        **product.env(),
        "DJANGO_SETTINGS_MODULE": "aimon_admin.settings.base",
        "DJANGO_SECRET_KEY": "bench-outages-secret-key-not-for-production-0123456789abcdef",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "AIMON_WEB_HOST": "127.0.0.1",
        "AIMON_WEB_PORT": str(port),
        "AIMON_WEB_WORKERS": "2",
        "AIMON_WAIT_WORKERS": "1",
        "AIMON_CELERY_CONCURRENCY": "1",
        "AIMON_RUN_DIR": str(run_dir / "run"),
        "AIMON_BEAT_SCHEDULE": str(run_dir / "celerybeat-schedule"),
        "DJANGO_STATIC_ROOT": str(run_dir / "static"),
    }
    log = (base / "prod.log").open("wb")
    prod = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "prod.py")],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        who = product.run("people", tag="bench-kp")
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or prod.poll() is not None:
                raise SystemExit(f"make prod did not come up: see {base / 'prod.log'}")
            time.sleep(0.2)
        time.sleep(2)  # the worker and beat up too
        before = _children(prod.pid)

        # The worker: killed with its pool; a task sent at once runs on the new one.
        from celery import Celery

        killed = time.monotonic()
        os.killpg(before["worker"], signal.SIGKILL)
        client = Celery("bench-outages", broker=product.redis.url(), set_as_current=False)
        task_id = client.send_task("audit.verify_chain").id
        client.close()
        with product.postgres.connect() as db:
            while not db.execute(
                "SELECT 1 FROM audit_auditevent WHERE request_id = %s", [f"task-{task_id}"]
            ).fetchone():
                if time.monotonic() - killed > 120:
                    raise SystemExit("the worker did not come back")
                time.sleep(0.05)
        worker_back = time.monotonic() - killed
        after_worker = _children(prod.pid)

        # The web server: killed with its workers; nginx answers for it until it is back.
        headers = {"Authorization": f"Bearer {who['token']}"}
        meanwhile: dict[int, int] = {}
        killed = time.monotonic()
        os.killpg(after_worker["web"], signal.SIGKILL)
        while True:
            response = httpx.post(
                f"{url}/api/v1/skill-decisions", json={"skills": ["x"]}, headers=headers, timeout=10
            )
            if response.status_code == 200:
                break
            meanwhile[response.status_code] = meanwhile.get(response.status_code, 0) + 1
            time.sleep(0.02)
        web_back = time.monotonic() - killed
        after_web = _children(prod.pid)
    finally:
        if prod.poll() is None:
            os.killpg(prod.pid, signal.SIGTERM)
            try:
                prod.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(prod.pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    untouched = {k for k in before if k not in ("worker", "web") and before[k] == after_web.get(k)}
    print("\n== make prod: one child killed ==")
    print(f"worker group killed: a task sent at once ran {ms(worker_back)} later")
    print(f"web group killed: decisions answered 200 again {ms(web_back)} later; meanwhile {meanwhile}")
    print(f"children untouched throughout: {sorted(untouched)} of {sorted(before)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["postgres", "redis", "restarts"])
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="aimon-bench-outages-"))
    postgres, redis, product = servers(base)
    try:
        if args.only in (None, "postgres"):
            part_postgres(postgres, product, base)
        if args.only in (None, "redis"):
            part_redis(redis, product, base)
        if args.only in (None, "restarts"):
            part_restarts(product, base)
    finally:
        redis.stop()
        if postgres.up:
            postgres.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
