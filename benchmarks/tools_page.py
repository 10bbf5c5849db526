"""Server time of the tool list (/registry/tools/) with 10,000 tools: first and deep pages.

Runs in a throwaway test database of whatever DATABASE_URL names (SQLite by default):

    .venv/bin/python benchmarks/tools_page.py
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/tools_page.py

"Server time" is the whole request inside Django (middleware, queries, template), timed
around the test client, so it leaves out only the network. The budget is 100 ms.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.test")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

TOOLS = 10_000
REPEAT = 25
BUDGET_MS = 100.0


def populate() -> Client:
    from aimon_admin.accounts.roles import Role
    from aimon_admin.accounts.services import user_create
    from aimon_admin.core.actors import Actor
    from aimon_admin.registry.choices import (
        DestructiveBehavior,
        IdempotencyBehavior,
        SideEffectLevel,
        ToolSource,
    )
    from aimon_admin.registry.models import Tool
    from aimon_admin.registry.services import mcp_server_create
    from aimon_admin.runtimes.services import runtime_create

    actor = Actor.system("benchmark")
    operator = user_create(
        username="bench",
        password="benchmark password 123",  # noqa: S106 - a throwaway test database
        roles=[Role.OPERATOR],
        actor=actor,
    )
    runtimes = [runtime_create(name=f"agent-{i}", actor=actor) for i in range(5)]
    servers = [
        mcp_server_create(name=f"server-{i}", transport="STDIO", command="x", actor=actor) for i in range(20)
    ]
    now = timezone.now()
    tools = []
    for i in range(TOOLS):
        local = i % 4 == 0
        level = SideEffectLevel.READ_ONLY if i % 3 == 0 else SideEffectLevel.MUTATING
        tools.append(
            Tool(
                source=ToolSource.LOCAL if local else ToolSource.MCP,
                runtime=runtimes[i % 5] if local else None,
                server=None if local else servers[i % 20],
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
    client = Client()
    client.force_login(operator)
    return client


def measure(client: Client, url: str) -> tuple[float, float, float]:
    """Median and slowest wall time, and median CPU time of this process (ms).

    CPU time leaves out waiting for other processes on a busy machine; on PostgreSQL it
    also leaves out the database server's own time, which the wall time includes.
    """
    client.get(url)  # warm caches (permissions, templates)
    wall, cpu = [], []
    for _ in range(REPEAT):
        start, start_cpu = time.perf_counter(), time.process_time()
        response = client.get(url)
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return statistics.median(wall), max(wall), statistics.median(cpu)


def main() -> int:
    from aimon_admin.registry.models import Tool

    # Not setup_test_environment(): its instrumented template rendering would be timed too.
    settings.ALLOWED_HOSTS = ["testserver"]
    # A name of its own, so it never clobbers the test suite's database on a shared server.
    connection.settings_dict.setdefault("TEST", {})["NAME"] = (
        None if connection.vendor == "sqlite" else "test_aimon_benchmark_tools_page"
    )
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        client = populate()
        names = list(Tool.objects.order_by("name", "id").values_list("name", "id"))
        deep_name, deep_id = names[-60]
        mcp = list(
            Tool.objects.filter(
                source="MCP", side_effect_level="MUTATING", destructive_behavior="DESTRUCTIVE"
            )
            .order_by("name", "id")
            .values_list("name", "id")
        )
        f_name, f_id = mcp[-60]
        cases = [
            ("first page", "/registry/tools/"),
            ("deep page (last 60)", f"/registry/tools/?after_name={deep_name}&after_id={deep_id}"),
            (
                "three filters, first page",
                "/registry/tools/?source=MCP&level=MUTATING&destructive=DESTRUCTIVE",
            ),
            (
                "three filters, deep page",
                "/registry/tools/?source=MCP&level=MUTATING&destructive=DESTRUCTIVE"
                f"&after_name={f_name}&after_id={f_id}",
            ),
            ("server + awaiting review (sparse)", "/registry/tools/?server=server-3&awaiting=on"),
            ("absent + runtime", "/registry/tools/?absent=on&runtime=agent-2"),
            ("htmx fragment, deep page", f"/registry/tools/?after_name={deep_name}&after_id={deep_id}"),
        ]
        print(
            f"{connection.vendor}, {Tool.objects.count():,} tools, median wall (max, median cpu) of {REPEAT}"
        )
        print(f"load average now: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cpus")
        worst = 0.0
        for label, url in cases:
            if label.startswith("htmx"):
                client.defaults["HTTP_HX_REQUEST"] = "true"
            median, slowest, cpu = measure(client, url)
            worst = max(worst, median)
            print(f"  {label:36s} {median:7.1f} ms  (max {slowest:6.1f} ms, cpu {cpu:5.1f} ms)")
        verdict = "within" if worst < BUDGET_MS else "OVER"
        print(f"worst median {worst:.1f} ms: {verdict} the {BUDGET_MS:.0f} ms budget")
        return 0 if worst < BUDGET_MS else 1
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    sys.exit(main())
