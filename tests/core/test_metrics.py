"""GET /metrics: who may read it (a token compared in constant time, or an allowed address;
neither configured, nobody), what the database's and Redis' failures count, the
multiprocess mode `make prod` runs (real processes write, one scrape sums them, a process
that has gone leaves the live gauge), and the sample Grafana dashboard, every name of which
is one a scrape exports."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis
from django.test import Client, override_settings
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.core import hints
from aimon_admin.core.cache import ResilientRedisCache
from aimon_admin.core.metrics import (
    METRICS_ADDRESS_MESSAGE,
    METRICS_OFF_MESSAGE,
    METRICS_TOKEN_MESSAGE,
    MULTIPROC_DIR_VARIABLE,
)
from tests.core.metrics_support import TOKEN, Scrape, moved, scrape
from tests.core.test_database_down import database_down, signed_in
from tests.ports import free_port
from tests.production.helpers import ROOT
from tests.production.test_launch import prod_module

pytestmark = pytest.mark.django_db

DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"


def get(**headers: Any) -> Any:
    return Client().get("/metrics", **headers)


# --- Who may read them -------------------------------------------------------------------------------


def test_with_neither_a_token_nor_an_allow_list_nobody_reads_them() -> None:
    with override_settings(AIMON_METRICS_TOKEN="", AIMON_METRICS_ALLOW=[]):
        response = get()
        with_a_guess = get(HTTP_AUTHORIZATION="Bearer ")
    for refused in (response, with_a_guess):
        assert refused.status_code == 403
        assert refused.content.decode() == METRICS_OFF_MESSAGE + "\n"
        assert b"aimon_" not in refused.content


@pytest.mark.parametrize(
    "authorization",
    [None, f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer", f"Basic {TOKEN}", TOKEN],
    ids=["none", "longer", "shorter", "empty", "basic", "no-scheme"],
)
def test_a_missing_or_wrong_token_is_a_401_with_no_numbers(authorization: str | None) -> None:
    headers = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}
    with override_settings(AIMON_METRICS_TOKEN=TOKEN, AIMON_METRICS_ALLOW=[]):
        response = get(**headers)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert response.content.decode() == METRICS_TOKEN_MESSAGE + "\n"
    assert b"aimon_" not in response.content


def test_the_token_reads_them_uncached() -> None:
    with override_settings(AIMON_METRICS_TOKEN=TOKEN, AIMON_METRICS_ALLOW=[]):
        response = get(HTTP_AUTHORIZATION=f"bearer {TOKEN}")  # the scheme in any case (RFC 9110)
    assert response.status_code == 200
    assert "no-cache" in response["Cache-Control"]
    assert "aimon_decisions" in {family.name for family in Scrape(response.content.decode()).families}


def test_only_get_reads_them() -> None:
    with override_settings(AIMON_METRICS_TOKEN=TOKEN):
        response = Client().post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 405


@pytest.mark.parametrize(
    ("allowed", "status"),
    [(["127.0.0.1"], 200), (["127.0.0.0/8", "::1"], 200), (["10.0.0.0/8"], 403), (["::1/128"], 403)],
)
def test_an_allowed_address_reads_them_without_a_token(allowed: list[str], status: int) -> None:
    with override_settings(AIMON_METRICS_TOKEN="", AIMON_METRICS_ALLOW=allowed):
        response = get()  # the test client comes from 127.0.0.1
    assert response.status_code == status
    if status == 403:
        assert response.content.decode() == METRICS_ADDRESS_MESSAGE + "\n"


def test_behind_a_proxy_the_address_is_the_one_the_proxy_appended() -> None:
    allowed = override_settings(
        AIMON_METRICS_TOKEN="", AIMON_METRICS_ALLOW=["10.0.0.0/8"], AIMON_TRUST_FORWARDED_FOR=True
    )
    with allowed:
        # What the client sent comes first; only the proxy's own entry, the last, counts.
        claimed = get(HTTP_X_FORWARDED_FOR="10.1.2.3, 192.0.2.9")
        appended = get(HTTP_X_FORWARDED_FOR="192.0.2.9, 10.1.2.3")
    assert (claimed.status_code, appended.status_code) == (403, 200)
    with override_settings(AIMON_METRICS_ALLOW=["10.0.0.0/8"], AIMON_TRUST_FORWARDED_FOR=False):
        assert get(HTTP_X_FORWARDED_FOR="10.1.2.3").status_code == 403  # not behind a proxy: ignored


def test_a_wrong_token_from_an_allowed_address_still_reads_them() -> None:
    # Either suffices: the allow-list does not depend on what Authorization says.
    with override_settings(AIMON_METRICS_TOKEN=TOKEN, AIMON_METRICS_ALLOW=["127.0.0.1"]):
        assert get(HTTP_AUTHORIZATION="Bearer wrong").status_code == 200
    with override_settings(AIMON_METRICS_TOKEN=TOKEN, AIMON_METRICS_ALLOW=["10.0.0.0/8"]):
        assert get(HTTP_AUTHORIZATION="Bearer wrong").status_code == 401


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("AIMON_METRICS_TOKEN", "too-short", "AIMON_METRICS_TOKEN must be at least 16 characters"),
        ("AIMON_METRICS_ALLOW", "127.0.0.1,intranet", "AIMON_METRICS_ALLOW: 'intranet' is not an address"),
    ],
)
def test_a_token_too_short_or_an_entry_that_is_no_address_stops_the_start(
    variable: str, value: str, named: str
) -> None:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="aimon_admin.settings.base", AIMON_DEMO="1")
    env[variable] = value
    setup = [sys.executable, "-c", "import django; django.setup()"]
    started = subprocess.run(setup, cwd=ROOT, env=env, capture_output=True, text=True)
    assert started.returncode != 0
    assert named in started.stderr


# --- What could not be reached --------------------------------------------------------------------------


def test_each_503_for_an_unreachable_database_is_counted_by_surface(
    runtime_token: str, approver: User
) -> None:
    api = Client()
    api.raise_request_exception = False
    page = signed_in(approver)
    before = scrape()
    with database_down():
        assert api.get("/api/v1/runtime", HTTP_AUTHORIZATION=f"Bearer {runtime_token}").status_code == 503
        assert page.get(reverse("approvals:inbox")).status_code == 503
        assert page.get(reverse("approvals:inbox")).status_code == 503
    after = scrape()
    assert moved(before, after, "aimon_database_errors_total", surface="api") == 1
    assert moved(before, after, "aimon_database_errors_total", surface="page") == 2


def test_redis_failures_are_counted_by_what_used_it() -> None:
    nobody = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    before = scrape()
    cache = ResilientRedisCache(nobody, {})
    assert cache.get("checkpoint") is None  # read as a miss
    cache.set("checkpoint", 1)  # skipped
    hints.send_soon("a wake-up", lambda: redis.Redis.from_url(nobody).publish("key", b"1"))
    after = scrape()
    assert moved(before, after, "aimon_redis_errors_total", use="cache") == 2
    assert moved(before, after, "aimon_redis_errors_total", use="hints") == 1


# --- Multiprocess mode, as make prod runs it ------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, time
    import django
    django.setup()
    from aimon_admin.core import metrics
    for _ in range(int(sys.argv[1])):
        metrics.decisions_observe("SKILL", time.perf_counter(), [("ALLOW", "AGENT")])
    metrics.LONG_POLLS_WAITING.inc()
    print("written", flush=True)
    sys.stdin.readline()  # held open, like a long-poll, until told to go
    """
)


def writer(folder: Path, decisions: int) -> subprocess.Popen[str]:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="aimon_admin.settings.test")
    env[MULTIPROC_DIR_VARIABLE] = str(folder)
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(decisions)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "written\n"
    return process


def test_two_processes_write_and_one_scrape_sums_them_until_the_gone_one_is_marked_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "prometheus"
    folder.mkdir()
    first, second = writer(folder, 3), writer(folder, 2)
    monkeypatch.setenv(MULTIPROC_DIR_VARIABLE, str(folder))  # this process scrapes their folder
    both = scrape()
    assert both.value("aimon_decisions_total", kind="SKILL", decision="ALLOW", source="AGENT") == 5
    assert both.value("aimon_decision_duration_seconds_count", kind="SKILL") == 5
    assert both.value("aimon_long_polls_waiting") == 2  # livesum: both processes' together

    second.communicate("go\n", timeout=30)
    prod = prod_module()
    assert prod.metrics_mark_dead(folder) == [second.pid]
    one_left = scrape()
    assert one_left.value("aimon_long_polls_waiting") == 1  # the gone one's gauge left the sum
    # What it counted stays counted.
    assert one_left.value("aimon_decisions_total", kind="SKILL", decision="ALLOW", source="AGENT") == 5
    assert prod.metrics_mark_dead(folder) == []  # the living one is left alone

    first.communicate("go\n", timeout=30)
    assert prod.metrics_mark_dead(folder) == [first.pid]
    assert scrape().value("aimon_long_polls_waiting") == 0


# --- The sample dashboard -------------------------------------------------------------------------------


def _expressions(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return found + [expr for value in node.values() for expr in _expressions(value)]
    if isinstance(node, list):
        return [expr for value in node for expr in _expressions(value)]
    return []


def test_every_name_the_dashboard_queries_is_exported_and_every_metric_has_a_panel() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = _expressions(dashboard["panels"])
    assert expressions
    used = {name for expr in expressions for name in re.findall(r"\baimon_[a-z0-9_]+", expr)}
    exported = scrape()
    assert used - exported.series() == set()
    families = {family.name for family in exported.families if family.name.startswith("aimon_")}
    shown = {family for family in families if any(name.startswith(family) for name in used)}
    assert families - shown == set()
