"""Server time of the audit log (/audit/events/) on PostgreSQL with 1,000,000 events.

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/audit_log.py
    .venv/bin/python benchmarks/audit_log.py --repeat 50 --base-url postgres://postgres@127.0.0.1:5432/postgres

It uses a database of its own, `aimon_bench_audit` (created if missing, never anyone
else's), and fills it once with `benchmarks/audit_generate_load.py --events 1000000 --sessions
100000` (skipped when it already holds that many events; --regenerate drops and refills it).
Then, logged in as a generated auditor through Django's test client, it times the first
page of the log with no filter and with each single filter (action, level, actor, runtime,
session, subject, since/until), and page 1,000 — found by following the `before=<seq>`
keyset cursor to the seq where that page starts — against page 1 of the same filter, in
the same run. "Server time" is the whole request inside Django (middleware, queries,
template), timed around the test client, so it leaves out only the network. Settings are
the test suite's (the product's own, with static files served without a manifest: no
collectstatic needed), as benchmarks/tools_page.py does.

The filters are timed in alternating rounds (each once per round), so a noisy moment on a
shared machine falls on all of them alike, and each line also gives this process's CPU time
per request: Django's own work, which what else the machine runs changes far less than the
wall time.

Targets: first page ≤ 100 ms with any single filter (--budget-ms; benchmarks/audit_proofs.py
asks ≤ 25 ms at 3,000,000 events and more); page 1,000 within 1.5x of page 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = "aimon_bench_audit"
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/postgres"
EVENTS = 1_000_000
SESSIONS = 100_000
PAGE_SIZE = 50
DEEP_PAGE = 1000
BUDGET_MS = 100.0
DEEP_RATIO = 1.5


def pg_url_for(base_url: str, name: str) -> str:
    parts = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def ensure_database(base_url: str, regenerate: bool) -> str:
    """Create (or with --regenerate recreate) the benchmark database; return its URL."""
    import psycopg

    with psycopg.connect(base_url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [BENCH_DB]).fetchone()
        if exists and regenerate:
            conn.execute(f"DROP DATABASE {BENCH_DB} WITH (FORCE)")
            exists = None
        if not exists:
            conn.execute(f"CREATE DATABASE {BENCH_DB}")
    return pg_url_for(base_url, BENCH_DB)


def ensure_data(database_url: str) -> None:
    """Migrate, and generate the data set unless it is already there (it takes minutes)."""
    env = dict(os.environ, DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="aimon_admin.settings.test")
    env.pop("REDIS_URL", None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
    )
    import psycopg

    with psycopg.connect(database_url.replace("postgres://", "postgresql://", 1)) as conn:
        count = conn.execute("SELECT count(*) FROM audit_auditevent").fetchone()[0]
    if count >= EVENTS:
        print(f"{BENCH_DB}: {count:,} events already there, not generating")
        return
    print(f"{BENCH_DB}: generating {EVENTS:,} events and {SESSIONS:,} sessions (minutes) …", flush=True)
    started = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "benchmarks/audit_generate_load.py",
            "--events",
            str(EVENTS),
            "--sessions",
            str(SESSIONS),
            *(["--yes"] if count else []),
        ],
        cwd=ROOT,
        env=env,
        check=True,
    )
    print(f"generated in {time.monotonic() - started:.0f} s")


def _spread(times: list[float]) -> tuple[float, float, float]:
    times = sorted(times)
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    return statistics.median(times), p95, times[-1]


def measure_alternating(client, urls: list[str], repeat: int) -> list[tuple[float, float, float, float]]:  # type: ignore[no-untyped-def]
    """Each of `urls` once per round, `repeat` rounds (after one warm-up each), so a noisy
    moment on a shared machine falls on every filter alike: per URL the median, p95 and max
    wall time and the median CPU time of this process (Django's own work, whatever else the
    machine runs), in ms."""
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code, response.content[:300])
    walls: list[list[float]] = [[] for _ in urls]
    cpus: list[list[float]] = [[] for _ in urls]
    for _ in range(repeat):
        for number, url in enumerate(urls):
            wall, cpu = time.perf_counter(), time.process_time()
            response = client.get(url)
            cpus[number].append((time.process_time() - cpu) * 1000)
            walls[number].append((time.perf_counter() - wall) * 1000)
            assert response.status_code == 200, (url, response.status_code)
    return [(*_spread(wall), statistics.median(cpu)) for wall, cpu in zip(walls, cpus, strict=True)]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-url", default=os.environ.get("AIMON_BENCH_POSTGRES_URL", DEFAULT_PG))
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--budget-ms", type=float, default=BUDGET_MS, help="the first page's target median")
    parser.add_argument("--regenerate", action="store_true", help="drop and refill the benchmark database")
    args = parser.parse_args()

    database_url = ensure_database(args.base_url, args.regenerate)
    ensure_data(database_url)

    os.environ["DATABASE_URL"] = database_url
    os.environ.pop("REDIS_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "aimon_admin.settings.test"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test import Client

    from aimon_admin.accounts.models import User
    from aimon_admin.audit.models import AuditEvent
    from aimon_admin.runtimes.models import AgentRuntime

    # Not setup_test_environment(): its instrumented template rendering would be timed too.
    settings.ALLOWED_HOSTS = ["testserver"]
    auditor = User.objects.filter(username__startswith="load-auditor-").order_by("id").first()
    if auditor is None:
        raise SystemExit("no generated auditor in the benchmark database (try --regenerate)")
    client = Client()
    client.force_login(auditor)

    # Filter values from the middle of the data set, the way an auditor would pick them.
    middle = AuditEvent.objects.filter(action="SKILL_GRANTED").order_by("-seq")[20_000]
    approver = middle.actor_label
    runtime = AgentRuntime.objects.filter(name__startswith="load-").order_by("name").first()
    assert runtime is not None
    day = middle.created_at.date().isoformat()
    filters = [
        ("no filter", {}),
        ("action=SKILL_GRANT_ESCALATED", {"action": "SKILL_GRANT_ESCALATED"}),
        ("action=AGENT_GRANTS_REVOKED (rare)", {"action": "AGENT_GRANTS_REVOKED"}),
        ("level=WARNING", {"level": "WARNING"}),
        (f"actor={approver}", {"actor": approver}),
        (f"runtime={runtime.name}", {"runtime": runtime.name}),
        (f"session={middle.session_key}", {"session": middle.session_key}),
        (f"subject={middle.subject}", {"subject": middle.subject}),
        (f"since={day}&until={day}", {"since": day, "until": day}),
    ]
    head = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first()
    print(
        f"PostgreSQL, {head:,} events (head seq), {PAGE_SIZE} per page, median / p95 / max of {args.repeat}; "
        f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cpus"
    )
    worst = 0.0
    urls = ["/audit/events/" + (f"?{urllib.parse.urlencode(query)}" if query else "") for _, query in filters]
    for (label, _), (median, p95, slowest, cpu) in zip(
        filters, measure_alternating(client, urls, args.repeat), strict=True
    ):
        worst = max(worst, median)
        print(
            f"  first page, {label:48s} {median:7.1f} ms  p95 {p95:7.1f}  max {slowest:7.1f}"
            f"  (Django's CPU {cpu:5.1f} ms)"
        )

    print(f"page {DEEP_PAGE} (before = the seq where it starts) against page 1 of the same filter:")
    ratios = []
    for label, query, queryset in [
        ("no filter", {}, AuditEvent.objects.all()),
        (
            "action=SKILL_GRANTED",
            {"action": "SKILL_GRANTED"},
            AuditEvent.objects.filter(action="SKILL_GRANTED"),
        ),
        ("level=WARNING", {"level": "WARNING"}, AuditEvent.objects.filter(level="WARNING")),
    ]:
        # The newest event of page 1000 is the (50 * 999)th newest; `before` is one above it.
        rows = list(
            queryset.order_by("-seq").values_list("seq", flat=True)[PAGE_SIZE * (DEEP_PAGE - 1) :][:1]
        )
        if not rows:
            print(f"  {label}: fewer than {DEEP_PAGE} pages, skipped")
            continue
        before = rows[0] + 1
        first_url = "/audit/events/" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        deep_url = "/audit/events/?" + urllib.parse.urlencode({**query, "before": before})
        # Both in alternation, so drift on a shared machine hits both alike.
        (one, *_), (far, *_) = measure_alternating(client, [first_url, deep_url], args.repeat)
        ratios.append(far / one)
        print(
            f"  {label:24s} page 1 {one:7.1f} ms   page {DEEP_PAGE} (before={before}) {far:7.1f} ms   "
            f"ratio {far / one:.2f}"
        )
    connection.close()
    within = worst <= args.budget_ms and all(r <= DEEP_RATIO for r in ratios)
    print(
        f"worst first-page median {worst:.1f} ms (target ≤ {args.budget_ms:.0f}); "
        f"deep/first ratios {', '.join(f'{r:.2f}' for r in ratios)} (target ≤ {DEEP_RATIO})"
        f": {'within' if within else 'OVER'} target"
    )
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
