"""Server time of each role's home (/) at the demo data, then at 10,000 tools and 1,000,000
audit events (the target: every home ≤ 100 ms).

Runs in a throwaway PostgreSQL database (created, filled, and dropped at the end; --keep keeps
it for a second look) on the server DATABASE_URL names:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/homes.py
    ... benchmarks/homes.py --events 100000 --sessions 10000   # a quicker, smaller look

1. The demo data (`manage.py demo_data`, as `make run` makes it): each home as the demo's
   operator, approver and auditor.
2. Then on top of it the big state: `benchmarks/audit_generate_load.py` writes --events audit
   events (20 runtimes, --sessions sessions, their requests and grants, escalations among them,
   some requests still pending), and 10,000 tools as benchmarks/tools_page.py makes them
   (local tools of every runtime, MCP tools of 20 servers, some awaiting review), with open
   relay findings, 200 sync runs per server (the latest failed on some), warnings of the last
   day, locked sign-ins, and 60 requests waiting (40 from one approver's sessions, 20 from
   runtimes' sessionless runs). Each home as a generated operator, auditor and that approver.

Each home is timed cold (the forecast's cache emptied before every request: the most a home
costs) and warm (within the forecast's half minute). "Server time" is the whole request inside
Django (middleware, queries, template), timed around the test client, so it leaves out only the
network; the CPU time of this process is printed beside it (on a busy machine the wall time
also counts waiting for a core). The budget is 100 ms.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.test")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

BUDGET_MS = 100.0
TOOLS = 10_000
SERVERS = 20
RUNS_PER_SERVER = 200
FINDINGS = 30
WARNINGS = 40
PENDING = 60
DB_NAME = "test_aimon_benchmark_homes"


def measure(client: Client, *, cold: bool, repeat: int) -> tuple[float, float, float]:
    """Median and slowest wall time, and median CPU time of this process (ms), of the home."""
    from aimon_admin.registry.home import forecast_forget

    client.get("/")  # warm what is not the home's own work (permissions, templates)
    wall, cpu = [], []
    for _ in range(repeat):
        if cold:
            forecast_forget()
        start, start_cpu = time.perf_counter(), time.process_time()
        response = client.get("/")
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"the home answered {response.status_code}")
    return statistics.median(wall), max(wall), statistics.median(cpu)


def report(title: str, people: dict[str, str], repeat: int) -> float:
    from aimon_admin.accounts.models import User

    print(f"\n{title}")
    worst = 0.0
    for role, username in people.items():
        client = Client()
        client.force_login(User.objects.get(username=username))
        for cold in (True, False):
            median, slowest, cpu = measure(client, cold=cold, repeat=repeat)
            worst = max(worst, median)
            label = f"{role} ({username}), {'cold' if cold else 'warm'}"
            print(f"  {label:48s} {median:7.1f} ms  (max {slowest:6.1f} ms, cpu {cpu:5.1f} ms)")
    return worst


def demo_state() -> dict[str, str]:
    with tempfile.TemporaryDirectory() as folder:
        # Not the developer's own .demo-credentials.json.
        settings.DEMO_CREDENTIALS_FILE = Path(folder) / "credentials.json"
        with open(os.devnull, "w") as quiet:
            call_command("demo_data", "--force", stdout=quiet)
    return {"operator": "operator", "approver": "approver", "auditor": "auditor"}


def big_state(events: int, sessions: int) -> dict[str, str]:
    from axes.models import AccessAttempt

    from aimon_admin.accounts.models import User
    from aimon_admin.approvals.choices import RequestStatus
    from aimon_admin.approvals.models import ApprovalRequest
    from aimon_admin.approvals.services import RequestInput, request_create
    from aimon_admin.audit.choices import AuditAction, AuditLevel
    from aimon_admin.audit.services import audit_record
    from aimon_admin.core.actors import Actor
    from aimon_admin.registry.choices import (
        DestructiveBehavior,
        IdempotencyBehavior,
        RelayFindingStatus,
        SideEffectLevel,
        SyncStatus,
        ToolSource,
    )
    from aimon_admin.registry.models import McpSyncRun, RelayFinding, Tool
    from aimon_admin.registry.services import mcp_server_create
    from aimon_admin.runtimes.models import AgentRuntime
    from benchmarks.audit_generate_load import Command as Generate

    started = time.monotonic()
    print(f"\ngenerating {events:,} audit events and {sessions:,} sessions (minutes) …", flush=True)
    with open(os.devnull, "w") as quiet:
        call_command(Generate(), events=events, sessions=sessions, force=True, yes=True, stdout=quiet)
    actor = Actor.system("benchmark")
    runtimes = list(AgentRuntime.objects.filter(name__startswith="load-").order_by("name"))
    servers = [
        mcp_server_create(name=f"bench-server-{i:02d}", transport="STDIO", command="x", actor=actor)
        for i in range(SERVERS)
    ]
    now = timezone.now()
    tools = []
    for i in range(TOOLS):
        local = i % 4 == 0
        level = SideEffectLevel.READ_ONLY if i % 3 == 0 else SideEffectLevel.MUTATING
        tools.append(
            Tool(
                source=ToolSource.LOCAL if local else ToolSource.MCP,
                runtime=runtimes[i % len(runtimes)] if local else None,
                server=None if local else servers[i % SERVERS],
                name=f"{['get', 'put', 'delete', 'list', 'sync'][i % 5]}_{i:05d}",
                fingerprint=f"{i:064x}",
                side_effect_level=level,
                destructive_behavior=DestructiveBehavior.NON_DESTRUCTIVE
                if level == SideEffectLevel.READ_ONLY or i % 2
                else DestructiveBehavior.DESTRUCTIVE,
                idempotency_behavior=IdempotencyBehavior.IDEMPOTENT
                if i % 7 == 0
                else IdempotencyBehavior.NON_IDEMPOTENT,
                claims={"readOnlyHint": level == SideEffectLevel.READ_ONLY, "title": "x" * 200},
                input_schema={
                    "type": "object",
                    "properties": {f"p{j}": {"type": "string"} for j in range(10)},
                },
                explanations={"side_effect_level": "x" * 100},
                awaiting_review=not local and i % 97 == 0,
                present=i % 13 != 0,
                resolved_at=now,
                last_seen_at=now,
            )
        )
    Tool.objects.bulk_create(tools, batch_size=1000)
    mcp_tools = list(Tool.objects.filter(source=ToolSource.MCP).order_by("id")[:FINDINGS])
    RelayFinding.objects.bulk_create(
        RelayFinding(
            tool=tool,
            runtime=runtimes[n % len(runtimes)],
            description="relayed",
            fingerprint=f"{n:064x}",
            status=RelayFindingStatus.OPEN,
            first_seen_at=now,
            last_seen_at=now,
        )
        for n, tool in enumerate(mcp_tools)
    )
    runs = []
    for n, server in enumerate(servers):
        for k in range(RUNS_PER_SERVER):
            latest = k == RUNS_PER_SERVER - 1
            failed = latest and n % 5 == 0
            runs.append(
                McpSyncRun(
                    server=server,
                    status=SyncStatus.FAILED if failed else SyncStatus.SUCCEEDED,
                    error="unreachable" if failed else "",
                    finished_at=now - dt.timedelta(hours=RUNS_PER_SERVER - k),
                )
            )
    McpSyncRun.objects.bulk_create(runs, batch_size=1000)
    for _ in range(WARNINGS):
        with transaction.atomic():
            audit_record(
                action=AuditAction.LOGIN_FAILED, actor=actor, level=AuditLevel.WARNING, subject="bench"
            )
    for n in range(20):
        AccessAttempt.objects.create(
            username=f"guess-{n}",
            ip_address=f"10.0.0.{n}",
            user_agent="bench",
            http_accept="*/*",
            path_info="/accounts/login/",
            get_data="",
            post_data="",
            failures_since_start=settings.AXES_FAILURE_LIMIT if n % 4 == 0 else 1,
        )
    with connection.cursor() as cursor:
        # As autovacuum would have by now (a real installation's tables are not a minute old).
        for table in ("registry_tool", "registry_mcpsyncrun", "registry_relayfinding", "audit_auditevent"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    # The generated history's requests are all closed by now: some still waiting, for one
    # generated approver (their own sessions) and for nobody (runtimes' sessionless runs).
    approver = User.objects.filter(username__startswith="load-approver").order_by("username")[0].username
    for n in range(PENDING):
        request_create(
            RequestInput(
                runtime=runtimes[n % len(runtimes)],
                skills=[f"bench-skill-{n % 7}"],
                session_id=f"bench-session-{n % 10}" if n % 3 else None,
                principal=approver if n % 3 else None,
            )
        )
    pending = list(
        ApprovalRequest.objects.filter(
            status=RequestStatus.PENDING, expires_at__gt=timezone.now()
        ).values_list("principal", flat=True)
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM audit_auditevent")
        (total_events,) = cursor.fetchone()
    print(
        f"built in {time.monotonic() - started:.0f} s: {Tool.objects.count():,} tools, "
        f"{total_events:,} events, {len(pending):,} requests pending "
        f"({approver} has {pending.count(approver)})"
    )
    operator = User.objects.filter(username__startswith="load-operator").order_by("username")[0].username
    auditor = User.objects.filter(username__startswith="load-auditor").order_by("username")[0].username
    return {"operator": operator, "approver": approver, "auditor": auditor}


def reused_people() -> dict[str, str]:
    """Who the big state's homes are timed as, in a database an earlier run kept."""
    from aimon_admin.accounts.models import User

    first = {
        role: User.objects.filter(username__startswith=f"load-{role}").order_by("username")[0].username
        for role in ("operator", "approver", "auditor")
    }
    return first


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help=f"keep the database ({DB_NAME}) afterwards")
    parser.add_argument(
        "--reuse", action="store_true", help="time the homes again in a database --keep kept (build nothing)"
    )
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        print("benchmarks/homes.py measures PostgreSQL: set DATABASE_URL to a PostgreSQL server")
        return 2
    # Not setup_test_environment(): its instrumented template rendering would be timed too.
    settings.ALLOWED_HOSTS = ["testserver"]
    connection.settings_dict.setdefault("TEST", {})["NAME"] = DB_NAME
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=args.reuse)
    try:
        print(f"{connection.vendor}, median wall (max, median cpu) of {args.repeat}")
        print(f"load average now: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cpus")
        if args.reuse:
            people = reused_people()
        else:
            worst = report("demo data (manage.py demo_data)", demo_state(), args.repeat)
            people = big_state(args.events, args.sessions)
        worst = max(
            0.0 if args.reuse else worst,
            report(f"{TOOLS:,} tools, {args.events:,}+ audit events", people, args.repeat),
        )
        print(f"load average now: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        verdict = "within" if worst < BUDGET_MS else "OVER"
        print(f"worst median {worst:.1f} ms: {verdict} the {BUDGET_MS:.0f} ms budget")
        return 0 if worst < BUDGET_MS else 1
    finally:
        if args.keep:
            print(f"kept {DB_NAME}")
        else:
            connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    sys.exit(main())
