"""Metrics under `make prod`, for real: scripts/prod.py runs nginx, granian (two WSGI
workers), uvicorn, a Celery worker and beat, each writing its metrics into the run folder's
`prometheus/`; one scrape through nginx sums them all. Decisions made by granian's workers,
a long-poll held by uvicorn and a chain verification run by the Celery worker are each read
back, exactly, from a scrape served by granian. Without the token, nginx passes the 401 on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from http.client import HTTPConnection
from pathlib import Path

import pytest
from celery import Celery

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.services import RequestInput, request_answer, request_create
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.tasks import VERIFY_TASK_NAME
from aimon_admin.runtimes.models import AgentRuntime
from tests.audit.helpers import database_for_new_process
from tests.core.metrics_support import TOKEN, Scrape
from tests.ports import free_port
from tests.production.helpers import Deadline, decide, request_json, tail, wait_for_health
from tests.production.test_launch import nginx, prod_module, production_env, start_prod  # noqa: F401 - nginx: the fixture

BUDGET_SECONDS = 90  # the launch (check, migrate, collectstatic) is most of it
DECISIONS = 6


def get_metrics(port: int, token: str | None) -> tuple[int, str]:
    conn = HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        conn.request("GET", "/metrics", headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def scrape_prod(port: int) -> Scrape:
    status, text = get_metrics(port, TOKEN)
    assert status == 200, text[:500]
    return Scrape(text)


@pytest.mark.usefixtures("nginx")
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_one_scrape_through_nginx_sums_what_every_process_of_make_prod_counted(
    redis_url: str, runtime: AgentRuntime, runtime_token: str, operator: User, tmp_path: Path
) -> None:
    deadline = Deadline(BUDGET_SECONDS)
    port = free_port()
    log = tmp_path / "prod.log"
    env = production_env(database_for_new_process(), redis_url, port, tmp_path)
    env["AIMON_METRICS_TOKEN"] = TOKEN
    folder = prod_module().config_from(env).metrics_dir
    prod = start_prod(env, log)
    try:
        wait_for_health(port, deadline, prod, log)
        assert get_metrics(port, None)[0] == 401
        assert get_metrics(port, "wrong-token-of-some-length")[0] == 401
        start = scrape_prod(port)
        assert start.total("aimon_decisions_total") == 0  # a fresh folder: nothing from before

        # Decisions, served by granian's two workers, counted in whichever served each.
        for _ in range(DECISIONS):
            assert decide(port, runtime_token, "s-1", ["deploy"]) == {"deploy": ("ASK", "DEFAULT")}

        # A long-poll held by uvicorn, seen waiting from a scrape that granian serves.
        waiting, _ = request_create(
            RequestInput(runtime=runtime, skills=["restart"], session_id="s-1", principal=operator.username)
        )
        polled: list[int] = []
        path = f"/api/v1/approval-requests/{waiting.pk}?wait=20"
        poll = threading.Thread(
            target=lambda: polled.append(request_json(port, "GET", path, token=runtime_token, timeout=30)[0])
        )
        poll.start()
        while (held := scrape_prod(port)).value("aimon_long_polls_waiting") != 1:
            deadline.check("waiting for the long-poll to count as waiting")
            time.sleep(0.1)
        assert held.value("aimon_approval_requests_pending", kind="SKILL") == 1
        request_answer(request=waiting, user=operator, answer=Answer.ALLOW_SESSION)
        poll.join(15)
        assert polled == [200]

        # A chain verification run by the Celery worker.
        client = Celery("aimon-metrics-test", broker=redis_url, set_as_current=False)
        try:
            task_id = client.send_task(VERIFY_TASK_NAME).id
        finally:
            client.close()
        while not AuditEvent.objects.filter(
            action=AuditAction.AUDIT_CHAIN_VERIFIED, request_id=f"task-{task_id}"
        ).exists():
            deadline.check("waiting for the Celery worker to verify the chain")
            assert prod.poll() is None, tail(log)
            time.sleep(0.2)

        end = scrape_prod(port)
        assert end.value("aimon_decisions_total", kind="SKILL", decision="ASK", source="DEFAULT") == DECISIONS
        assert end.value("aimon_decision_duration_seconds_count", kind="SKILL") == DECISIONS
        assert end.value("aimon_long_polls_waiting") == 0
        assert end.value("aimon_approval_requests_pending", kind="SKILL") == 0
        assert end.value("aimon_audit_verifications_total", outcome="OK") == 1
        assert end.value("aimon_audit_verification_ok") == 1
        # Every process writes into the run folder's prometheus/, emptied at this start.
        written = {path.name.split("_")[0] for path in folder.iterdir()}
        assert {"counter", "histogram", "gauge"} <= written
    finally:
        if prod.poll() is None:
            os.killpg(prod.pid, signal.SIGTERM)
        try:
            prod.wait(max(deadline.left(), 20))
        except subprocess.TimeoutExpired:
            os.killpg(prod.pid, signal.SIGKILL)
            pytest.fail(f"the script did not stop on SIGTERM:\n{tail(log)}")
