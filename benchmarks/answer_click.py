"""Server time of the approver's "Allow for this session" click, with each permission backend.

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/answer_click.py                     # SQLite, 6 rounds of 100
    .venv/bin/python benchmarks/answer_click.py --db both --rounds 8 --clicks 150

The click is the htmx POST of an answer to a one-skill request, signed in as its approver,
through Django's test client in this process: the whole request inside Django (middleware,
sign-in, permissions, the answer's writes and its audit event, the card rendered), only the
network left out. Each click answers a request opened just before it (not timed).

The same clicks are made with two AUTHENTICATION_BACKENDS, alternating click by click (A B,
then B A, ...), so a load that drifts weighs on both alike: the product's configured backend,
and Django's own `ModelBackend` (axes in front of both, as configured). Each backend's clicks
use a client signed in through it. Printed: per backend the median wall and CPU time of a
click (this process's CPU: SQLite runs in it; PostgreSQL's server is another process, so on
PostgreSQL read the wall time) and its queries; then each figure as a ratio of the stock
backend's, over the medians and per round. A special backend stays only if it buys at least
10% of the click's server time. Once the product's backend is Django's own, the same run is
the control: both sides alike, its ratio shows the noise.

SQLite: a throwaway file in a temporary folder. PostgreSQL (`--db postgres`): a throwaway
database (`--pg-database`, `aimon_bench_answer_click` unless named) on the server DATABASE_URL
names (created, dropped at the end).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
STOCK = "django.contrib.auth.backends.ModelBackend"
BENCH_DB = "aimon_bench_answer_click"
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/postgres"


def run_child(rounds: int, clicks: int) -> dict[str, object]:
    """In the child process: the world made, then the timed rounds; returns the figures."""
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, override_settings
    from django.urls import reverse

    from aimon_admin.accounts.roles import Role
    from aimon_admin.accounts.services import user_create
    from aimon_admin.approvals.choices import Answer
    from aimon_admin.approvals.services import RequestInput, request_create
    from aimon_admin.core.actors import Actor
    from aimon_admin.runtimes.services import runtime_create

    call_command("migrate", "--noinput", verbosity=0)
    actor = Actor.system("benchmark")
    password = "bench-password-not-secret-0123456789"  # noqa: S105 - a throwaway database's
    approver = user_create(username="bench-approver", password=password, roles=[Role.APPROVER], actor=actor)
    runtime = runtime_create(name="bench", actor=actor)

    configured = list(settings.AUTHENTICATION_BACKENDS)
    product = configured[-1]
    backends = {"product": configured, "stock": [*configured[:-1], STOCK]}
    clients: dict[str, Client] = {}
    for name, chain in backends.items():
        with override_settings(AUTHENTICATION_BACKENDS=chain):
            clients[name] = Client(HTTP_HOST="127.0.0.1")
            clients[name].force_login(approver, backend=chain[-1])

    opened = 0

    def click(name: str, counted: list[int] | None = None) -> tuple[float, float]:
        nonlocal opened
        opened += 1
        request, _ = request_create(
            RequestInput(
                runtime=runtime, skills=["deploy"], session_id=f"s-{opened}", principal=approver.username
            )
        )
        url = reverse("approvals:answer", args=[request.pk])
        # Queries are captured on the one click that counts them: capturing costs time too.
        capture = CaptureQueriesContext(connection) if counted is not None else contextlib.nullcontext()
        with capture as captured:
            start, start_cpu = time.perf_counter(), time.process_time()
            response = clients[name].post(
                url, {"answer": Answer.ALLOW_SESSION, "skill": "deploy"}, HTTP_HX_REQUEST="true"
            )
            wall, cpu = (time.perf_counter() - start) * 1000, (time.process_time() - start_cpu) * 1000
        if counted is not None:
            counted.append(len(captured))
        if response.status_code != 200 or 'data-decision="ALLOW"' not in response.content.decode():
            raise SystemExit(f"{name}: the click answered {response.status_code}: {response.content[:300]!r}")
        return wall, cpu

    queries: dict[str, str] = {}
    for name, chain in backends.items():
        with override_settings(AUTHENTICATION_BACKENDS=chain):
            for _ in range(20):  # warm: templates, the rule index, the connection
                click(name)
            # Four clicks: the audit tree's append reads its right edge or not, by the leaf's place.
            counted: list[int] = []
            for _ in range(4):
                click(name, counted)
            queries[name] = (
                f"{min(counted)}" if min(counted) == max(counted) else f"{min(counted)}-{max(counted)}"
            )

    order = ["product", "stock"]
    per_round: dict[str, list[tuple[float, float]]] = {name: [] for name in order}
    for index in range(rounds):
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in order}
        for number in range(clicks):
            # Click by click, A B then B A: a load that drifts weighs on both alike.
            for name in order if (index + number) % 2 == 0 else order[::-1]:
                with override_settings(AUTHENTICATION_BACKENDS=backends[name]):
                    times[name].append(click(name))
        for name in order:
            per_round[name].append(
                (statistics.median(t[0] for t in times[name]), statistics.median(t[1] for t in times[name]))
            )
    return {"vendor": connection.vendor, "product": product, "queries": queries, "rounds": per_round}


def child(database_url: str, rounds: int, clicks: int) -> dict[str, object]:
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="benchmarks.settings",
        DATABASE_URL=database_url,
        # SQLite keeps its connection; PostgreSQL borrows from the product's pool, as served.
        DATABASE_CONN_MAX_AGE="60" if database_url.startswith("sqlite") else "0",
        PYTHONPATH=str(ROOT),
        # What runs after the commit in a worker (the notifications' fan-out) is queued, as in
        # production, not run inside the click: an in-memory broker, no worker.
        CELERY_TASK_ALWAYS_EAGER="0",
    )
    env.pop("REDIS_URL", None)
    out = subprocess.run(
        [PYTHON, __file__, "--child", "--rounds", str(rounds), "--clicks", str(clicks)],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(figures: dict[str, object], rounds: int, clicks: int) -> None:
    per_round = figures["rounds"]
    assert isinstance(per_round, dict)
    queries = figures["queries"]
    assert isinstance(queries, dict)
    print(
        f"{figures['vendor']}: {rounds} rounds of {clicks} clicks per backend, alternating "
        f"(product backend: {figures['product']})"
    )
    medians = {}
    for name, values in per_round.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        medians[name] = (wall, cpu)
        print(
            f"  {name:7s} wall {wall:6.2f} ms  CPU {cpu:6.2f} ms  per click (median of round medians; "
            f"rounds {min(v[0] for v in values):.2f}-{max(v[0] for v in values):.2f} ms); "
            f"{queries[name]} queries"
        )
    pairs = [p[0] / s[0] for p, s in zip(per_round["product"], per_round["stock"], strict=True)]
    wall_ratio = medians["product"][0] / medians["stock"][0]
    cpu_ratio = medians["product"][1] / medians["stock"][1]
    print(
        f"  product / stock: wall {wall_ratio:.3f}, CPU {cpu_ratio:.3f} "
        f"(pairs of rounds, wall: {min(pairs):.3f}-{max(pairs):.3f}, median {statistics.median(pairs):.3f}); "
        f"the product backend saves {(1 - wall_ratio) * 100:.1f}% of the click's wall time "
        f"({(1 - cpu_ratio) * 100:.1f}% of its CPU); a special must buy >= 10%"
    )


def _pg_admin(base_url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(base_url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        conn.execute(sql)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per backend (alternating)")
    parser.add_argument("--clicks", type=int, default=100, help="clicks timed per round")
    parser.add_argument("--pg-database", default=BENCH_DB, help="the throwaway PostgreSQL database's name")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.rounds, args.clicks)))
        return 0
    if args.db in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="aimon_bench_answer_click_") as folder:
            report(
                child(f"sqlite:///{folder}/bench.sqlite3", args.rounds, args.clicks), args.rounds, args.clicks
            )
    if args.db in ("postgres", "both"):
        base_url = os.environ.get("DATABASE_URL") or DEFAULT_PG
        name = args.pg_database
        _pg_admin(base_url, f"DROP DATABASE IF EXISTS {name}")
        _pg_admin(base_url, f"CREATE DATABASE {name}")
        try:
            url = urllib.parse.urlunsplit(urllib.parse.urlsplit(base_url)._replace(path=f"/{name}"))
            report(child(url, args.rounds, args.clicks), args.rounds, args.clicks)
        finally:
            _pg_admin(base_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
