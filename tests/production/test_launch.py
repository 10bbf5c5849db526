"""`make prod` for real: scripts/prod.py against the test PostgreSQL database and Redis.

The script checks its environment, runs `check --deploy`, migrates, collects static files,
writes and checks nginx's configuration, then supervises the production topology: nginx on
the one address, granian (WSGI, several workers) behind it for request/response paths,
uvicorn (ASGI) for the long-polls and streamed exports, a Celery worker and Celery beat.
This test starts it as an operator would, and through the one address decides, long-polls
until an answer wakes it, reads a page and a static file WhiteNoise serves from
STATIC_ROOT, sends a task through Redis to its worker, then SIGTERMs it and checks that
every process it started has gone. Bounded: 60 s in all. The tests that start it run
only where nginx is installed (CI installs it: apt-get install -y nginx).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest
from celery import Celery

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.services import RequestInput, request_answer, request_create
from aimon_admin.audit import signing
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.tasks import VERIFY_TASK_NAME
from aimon_admin.core.context import Channel
from aimon_admin.core.encryption import new_key
from aimon_admin.core.middleware import BODY_TOO_LARGE_MESSAGE
from aimon_admin.runtimes.models import AgentRuntime
from tests.audit.helpers import database_for_new_process
from tests.conftest import skip_or_fail
from tests.ports import free_port
from tests.production.helpers import (
    ROOT,
    Deadline,
    child_env,
    decide,
    request_json,
    session_members,
    tail,
    wait_for_health,
)

BUDGET_SECONDS = 60
SCRIPT = ROOT / "scripts" / "prod.py"
NGINX = shutil.which("nginx") or shutil.which("/usr/sbin/nginx")


@pytest.fixture
def nginx() -> str:
    """The topology's proxy; CI installs it (AIMON_REQUIRE_SERVICES=1 turns its absence into a failure)."""
    if NGINX is None:
        skip_or_fail("nginx is not installed: apt-get install -y nginx")
    assert NGINX is not None
    return NGINX


def prod_module() -> ModuleType:
    """scripts/prod.py as a module: its own code path, not a copy of it."""
    spec = importlib.util.spec_from_file_location("aimon_prod_script", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def production_env(database_url: str, redis_url: str, port: int, tmp_path: Path) -> dict[str, str]:
    """What an operator sets for production, on this test's database and Redis."""
    return child_env(
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        DJANGO_SECRET_KEY="launch-test-secret-key-not-for-production-0123456789abcdef",
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        AIMON_WEB_HOST="127.0.0.1",
        AIMON_WEB_PORT=str(port),
        AIMON_WEB_WORKERS="2",
        AIMON_WAIT_WORKERS="1",
        AIMON_CELERY_CONCURRENCY="1",
        AIMON_BEAT_SCHEDULE=str(tmp_path / "beat" / "celerybeat-schedule"),
        AIMON_STOP_TIMEOUT="15",
    )


def start_prod(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """The script, as `make prod` runs it, in a session of its own, so every process it
    starts (and theirs) can be found again."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, str(SCRIPT)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_make_prod_runs_the_script() -> None:
    # The Makefile target is the documented entry point; it must run this very script.
    dry_run = subprocess.run(
        ["make", "--no-print-directory", "-n", "prod"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert dry_run.stdout.strip().splitlines()[-1].endswith("python scripts/prod.py")


@pytest.mark.parametrize(
    ("unset", "named"),
    [
        ("DATABASE_URL", "DATABASE_URL is not set"),
        ("REDIS_URL", "REDIS_URL is not set"),
        ("DJANGO_SECRET_KEY", "DJANGO_SECRET_KEY is not set"),
        ("DJANGO_ALLOWED_HOSTS", "DJANGO_ALLOWED_HOSTS is not set"),
        ("AIMON_SECRETS_KEY", "AIMON_SECRETS_KEY_FILE (or AIMON_SECRETS_KEY) is not set"),
    ],
)
def test_the_script_refuses_to_start_without_what_production_needs(unset: str, named: str) -> None:
    env = child_env(
        DATABASE_URL="postgres://aimon@db.invalid:5432/aimon",
        REDIS_URL="redis://redis.invalid:6379/0",
        DJANGO_SECRET_KEY="x" * 50,
        DJANGO_ALLOWED_HOSTS="aimon.example.com",
        AIMON_SECRETS_KEY=new_key(),
    )
    env.pop("AIMON_SECRETS_KEY_FILE", None)
    del env[unset]
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert named in result.stderr
    assert "started" not in result.stderr  # nothing was started, nothing migrated


def test_the_script_refuses_sqlite_debug_and_eager_tasks() -> None:
    env = child_env(
        DATABASE_URL="sqlite:///db.sqlite3",
        REDIS_URL="redis://redis.invalid:6379/0",
        DJANGO_SECRET_KEY="x" * 50,
        DJANGO_ALLOWED_HOSTS="aimon.example.com",
        DJANGO_DEBUG="1",
        AIMON_DEMO="1",
        CELERY_TASK_ALWAYS_EAGER="1",
        AIMON_WEB_WORKERS="0",
        AIMON_RUN_BEAT="maybe",
    )
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    for problem in (
        "DATABASE_URL must be a PostgreSQL URL",
        "DJANGO_DEBUG is on",
        "AIMON_DEMO is on",
        "CELERY_TASK_ALWAYS_EAGER is on",
        "AIMON_WEB_WORKERS must be a whole number ≥ 1, not '0'",
        "AIMON_RUN_BEAT must be 1 or 0, not 'maybe'",
    ):
        assert problem in result.stderr


def test_the_script_refuses_to_start_without_nginx_and_says_how_to_install_it() -> None:
    prod = prod_module()
    env = child_env(
        DATABASE_URL="postgres://aimon@db.invalid:5432/aimon",
        REDIS_URL="redis://redis.invalid:6379/0",
        DJANGO_SECRET_KEY="x" * 50,
        DJANGO_ALLOWED_HOSTS="aimon.example.com",
        AIMON_NGINX="/nonexistent/nginx",
    )
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert prod.NGINX_MISSING in result.stderr
    assert "apt-get install -y nginx" in prod.NGINX_MISSING
    assert "started" not in result.stderr


def test_the_script_refuses_a_run_dir_nginx_workers_cannot_reach_when_started_as_root(tmp_path: Path) -> None:
    prod = prod_module()
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    closed.chmod(0o700)
    env = production_env("postgres://aimon@db.invalid:5432/aimon", "redis://r.invalid:6379/0", 8123, tmp_path)
    env = dict(env, AIMON_NGINX=sys.executable, AIMON_RUN_DIR=str(closed / "run"))
    if os.geteuid() != 0:
        assert prod.config_from(env).run_dir == closed / "run"  # nginx's workers run as this user
        return
    with pytest.raises(prod.ConfigError, match="which other users cannot enter"):
        prod.config_from(env)


def test_nginx_routes_waiting_paths_to_uvicorn_and_everything_else_to_granian(tmp_path: Path) -> None:
    from aimon_admin.core.api import UNAVAILABLE_MESSAGE

    prod = prod_module()
    env = production_env("postgres://aimon@db.invalid:5432/aimon", "redis://r.invalid:6379/0", 8123, tmp_path)
    config = prod.config_from(dict(env, AIMON_NGINX=sys.executable))  # any binary: nginx is not run here
    conf = prod.nginx_conf(config)
    assert "listen 127.0.0.1:8123 " in conf
    assert f"server unix:{config.web_socket};" in conf
    assert f"server unix:{config.wait_socket};" in conf
    wait_patterns = [re.compile(p) for p in prod.WAIT_LOCATIONS]
    for path, waits in [
        ("/api/v1/approval-requests/0f9c0000-0000-4000-8000-000000000000", True),
        ("/api/v1/approval-requests/0f9c0000-0000-4000-8000-000000000000/", True),
        # A tool request's long-poll too: under granian each wait held one of its few threads.
        ("/api/v1/tool-approval-requests/0f9c0000-0000-4000-8000-000000000000", True),
        ("/api/v1/tool-approval-requests/0f9c0000-0000-4000-8000-000000000000/cancel", False),
        ("/api/v1/tool-approval-requests", False),
        ("/audit/events/export.csv", True),
        ("/audit/events/export.jsonl", True),
        ("/api/v1/approval-requests", False),
        ("/api/v1/approval-requests/0f9c0000-0000-4000-8000-000000000000/cancel", False),
        ("/api/v1/skill-decisions", False),
        ("/approvals/", False),
    ]:
        assert any(p.search(path) for p in wait_patterns) is waits, path
    # nginx's own answers are the API's JSON bodies, with the product's wording.
    answers = re.findall(r"default_type application/json;\s+return (\d+) '([^']*)';", conf)
    bodies = [(int(code), json.loads(body)) for code, body in answers]
    assert (413, {"error": "payload_too_large", "detail": BODY_TOO_LARGE_MESSAGE}) in bodies
    assert (503, {"error": "unavailable", "detail": UNAVAILABLE_MESSAGE}) in bodies
    assert len(bodies) == 2 + len(prod.NGINX_REFUSALS)  # and each of nginx's own refusals
    # Sign-in lockouts count by the client nginx names, never by what the client claims.
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in conf
    assert config.env["AIMON_BEHIND_PROXY"] == "1"
    # The probes go to the WSGI server as they are, cut short if one hangs.
    for probe in ("/healthz", "/readyz"):
        location = re.search(rf"location = {probe} {{([^}}]*)}}", conf)
        assert location is not None, probe
        assert "proxy_pass http://aimon_web;" in location.group(1)
        assert f"proxy_read_timeout {prod.PROBE_READ_TIMEOUT_SECONDS}s;" in location.group(1)
    # Logs for a collector: JSON, unless the operator chose text.
    assert config.env["AIMON_LOG_FORMAT"] == "json"
    chose = prod.config_from(dict(env, AIMON_NGINX=sys.executable, AIMON_LOG_FORMAT="text"))
    assert chose.env["AIMON_LOG_FORMAT"] == "text"


@pytest.mark.usefixtures("nginx")
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_prod_serves_decides_runs_tasks_and_stops_every_process_on_sigterm(
    redis_url: str, runtime: AgentRuntime, runtime_token: str, operator: User, tmp_path: Path
) -> None:
    deadline = Deadline(BUDGET_SECONDS)
    # S4: an answer made before the launch, committed, for the launched nodes to read.
    approval, _ = request_create(
        RequestInput(runtime=runtime, skills=["deploy"], session_id="s-1", principal=operator.username)
    )
    request_answer(request=approval, user=operator, answer=Answer.ALLOW_SESSION)

    port = free_port()
    log = tmp_path / "prod.log"
    env = production_env(database_for_new_process(), redis_url, port, tmp_path)
    # A signing key (A4), as production has: /readyz checks it.
    signing.create_key(tmp_path / "audit-signing-key.pem")
    env.update(
        AIMON_AUDIT_SIGNING_KEY=str(tmp_path / "audit-signing-key.pem"),
        AIMON_AUDIT_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
    )
    prod = start_prod(env, log)
    try:
        wait_for_health(port, deadline, prod, log)
        # Ready through nginx once the worker answers: every check of production's passes.
        while (ready := request_json(port, "GET", "/readyz"))[0] != 200:
            deadline.check(f"waiting for /readyz: {ready}")
            assert prod.poll() is None, tail(log)
            time.sleep(0.3)
        checks = ready[1]["checks"]
        assert set(checks) == {"database", "migrations", "audit_signing_key", "redis", "celery"}, ready
        assert {entry["status"] for entry in checks.values()} == {"ok"}

        # nginx, granian with two WSGI workers, uvicorn, a Celery worker and beat, all alive
        # under the script.
        commands = [command for _, command in session_members(prod.pid)]
        assert sum("nginx: master process" in c for c in commands) == 1, commands
        assert sum("granian" in c and "--interface wsgi" in c and "--workers 2" in c for c in commands) >= 1
        assert sum("uvicorn" in c and "aimon_admin.asgi:application" in c for c in commands) == 1, commands
        assert sum("celery" in c and " worker " in c for c in commands) >= 1, commands
        assert sum("celery" in c and " beat " in c for c in commands) == 1, commands

        # S2: one decision over HTTP, exact: the session's answer, and the default for the rest.
        assert decide(port, runtime_token, "s-1", ["deploy", "drop-database"]) == {
            "deploy": ("ALLOW", "SESSION"),
            "drop-database": ("ASK", "DEFAULT"),
        }
        status, body = request_json(port, "GET", "/api/v1/runtime")
        assert (status, body["error"]) == (401, "not_authenticated")

        # S7: a long-poll through the one address (nginx routes it to uvicorn) waits, and an
        # answer wakes it through Redis.
        waiting, _ = request_create(
            RequestInput(runtime=runtime, skills=["restart"], session_id="s-1", principal=operator.username)
        )
        polled: list[tuple[int, object]] = []
        poll = threading.Thread(
            target=lambda: polled.append(
                request_json(
                    port,
                    "GET",
                    f"/api/v1/approval-requests/{waiting.pk}?wait=20",
                    token=runtime_token,
                    timeout=30,
                )
            )
        )
        poll.start()
        time.sleep(1.0)  # subscribed and waiting
        assert poll.is_alive(), polled
        request_answer(request=waiting, user=operator, answer=Answer.ALLOW_SESSION)
        poll.join(15)
        assert not poll.is_alive(), "the long-poll was not woken"
        (poll_status, poll_body) = polled[0]
        assert poll_status == 200
        assert isinstance(poll_body, dict)
        assert (poll_body["status"], poll_body["answered_by"]) == ("ANSWERED", operator.username)

        # A body over the API's limit is refused by nginx itself, in the API's own words.
        status, body = request_json(port, "POST", "/api/v1/skill-decisions", {"pad": "x" * (1 << 20)})
        assert (status, body) == (413, {"error": "payload_too_large", "detail": BODY_TOO_LARGE_MESSAGE})

        # Static files: collected into STATIC_ROOT under hashed names, served by WhiteNoise.
        conn_status, page = _get(port, "/accounts/login/")
        assert conn_status == 200
        stylesheet = page.split('rel="stylesheet" href="', 1)[1].split('"', 1)[0]
        assert stylesheet.startswith("/static/css/app.")
        assert stylesheet != "/static/css/app.css"
        css_status, css, headers = _get_with_headers(port, stylesheet)
        assert css_status == 200
        assert ".card" in css
        assert headers["content-type"].startswith("text/css")
        assert "immutable" in headers["cache-control"]  # hashed name: cached for good

        # The Celery worker answers: a task sent through Redis, run by it against PostgreSQL.
        # Not the current app: shared tasks in later tests must keep resolving to the product's.
        client = Celery("aimon-launch-test", broker=redis_url, set_as_current=False)
        try:
            task_id = client.send_task(VERIFY_TASK_NAME).id
        finally:
            client.close()
        while not (
            verified := AuditEvent.objects.filter(
                action=AuditAction.AUDIT_CHAIN_VERIFIED, request_id=f"task-{task_id}"
            ).first()
        ):
            deadline.check("waiting for the Celery worker to run the verification task")
            assert prod.poll() is None, tail(log)
            time.sleep(0.2)
        assert verified.channel == Channel.TASK
        assert verified.details["problem"] == ""
        assert prod.poll() is None, "the script stopped while everything was healthy"
    finally:
        if prod.poll() is None:
            os.killpg(prod.pid, signal.SIGTERM)  # as a terminal's Ctrl-C or systemd would, to the group
        try:
            status = prod.wait(max(deadline.left(), 20))
        except subprocess.TimeoutExpired:
            os.killpg(prod.pid, signal.SIGKILL)
            pytest.fail(f"the script did not stop on SIGTERM:\n{tail(log)}")

    assert status == 0, tail(log)
    assert session_members(prod.pid) == [], f"processes outlived the script:\n{tail(log)}"
    output = log.read_text()
    # JSON records from the web server (the decision, naming its runtime) and the worker (the
    # task, under its own request id); the token never.
    logged = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    decisions = [r for r in logged if r.get("route") == "api:skill-decisions"]
    assert decisions, output[-2000:]
    assert {(r["logger"], r["status"], r["runtime"]) for r in decisions} == {
        ("aimon.requests", 200, runtime.name)
    }
    (task,) = [r for r in logged if r.get("logger") == "aimon.tasks" and r.get("task_id") == task_id]
    assert (task["task"], task["state"], task["request_id"]) == (
        VERIFY_TASK_NAME,
        "SUCCESS",
        f"task-{task_id}",
    )
    assert runtime_token not in output
    for name in ("proxy", "web", "worker", "beat"):
        assert re.search(rf"prod: {name} \(pid [0-9]+\) stopped, status 0", output), output[-2000:]
    # uvicorn with one worker ends by re-raising the SIGTERM it handled, after its graceful stop.
    assert re.search(r"prod: wait \(pid [0-9]+\) stopped, status (0|-15)", output), output[-2000:]
    deadline.check("stopping")


def _members(prod: subprocess.Popen[bytes]) -> dict[str, int]:
    """The script's children by name: the leader of each group it started (pid)."""
    found = {}
    for pid, command in session_members(prod.pid):
        if os.getpgid(pid) != pid:
            continue  # a worker of a child, not a child
        for name, marks in CHILD_MARKS.items():
            if all(mark in command for mark in marks):
                found[name] = pid
    return found


CHILD_MARKS = {
    "proxy": ("nginx: master process",),
    "web": ("granian", "--interface wsgi"),
    "wait": ("uvicorn", "aimon_admin.asgi:application"),
    "worker": ("celery", " worker "),
    "beat": ("celery", " beat "),
}


def _run_task(redis_url: str, deadline: Deadline, prod: subprocess.Popen[bytes], log: Path) -> None:
    """A task sent through Redis, run by the worker against PostgreSQL."""
    client = Celery("aimon-launch-test", broker=redis_url, set_as_current=False)
    try:
        task_id = client.send_task(VERIFY_TASK_NAME).id
    finally:
        client.close()
    while not AuditEvent.objects.filter(
        action=AuditAction.AUDIT_CHAIN_VERIFIED, request_id=f"task-{task_id}"
    ):
        deadline.check("waiting for the Celery worker to run the verification task")
        assert prod.poll() is None, tail(log)
        time.sleep(0.2)


@pytest.mark.usefixtures("nginx")
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_dead_child_is_started_again_alone_and_the_others_serve_on(
    redis_url: str, runtime: AgentRuntime, runtime_token: str, tmp_path: Path
) -> None:
    # A killed worker group or web group comes back by itself; nothing else is interrupted.
    deadline = Deadline(BUDGET_SECONDS)
    port = free_port()
    log = tmp_path / "prod.log"
    env = production_env(database_for_new_process(), redis_url, port, tmp_path)
    prod = start_prod(env, log)
    try:
        wait_for_health(port, deadline, prod, log)
        before = _members(prod)
        assert set(before) == set(CHILD_MARKS), before

        os.killpg(before["worker"], signal.SIGKILL)  # the worker and its pool, at once
        _run_task(redis_url, deadline, prod, log)  # a new worker runs it
        after = _members(prod)
        assert after["worker"] != before["worker"]
        assert {k: v for k, v in after.items() if k != "worker"} == {
            k: v for k, v in before.items() if k != "worker"
        }, "another child was interrupted"

        os.killpg(before["web"], signal.SIGKILL)  # granian and its workers
        while True:
            deadline.check("waiting for the web server to serve again")
            status, body = request_json(
                port, "POST", "/api/v1/skill-decisions", {"skills": ["x"]}, token=runtime_token
            )
            if status == 200:
                break
            # Meanwhile nginx answers for it, in the API's words, never a decision.
            assert (status, body["error"]) == (503, "unavailable"), (status, body)
            time.sleep(0.1)
        again = _members(prod)
        assert again["web"] != before["web"]
        assert {k: v for k, v in again.items() if k != "web"} == {
            k: v for k, v in after.items() if k != "web"
        }, "another child was interrupted"
        output = log.read_text()
        assert re.search(
            r"prod: worker \(pid [0-9]+\) exited with status -9; starting it again in 0.5 s", output
        )
        assert re.search(
            r"prod: web \(pid [0-9]+\) exited with status -9; starting it again in 0.5 s", output
        )
        assert prod.poll() is None
    finally:
        if prod.poll() is None:
            os.killpg(prod.pid, signal.SIGTERM)
        try:
            prod.wait(max(deadline.left(), 20))
        except subprocess.TimeoutExpired:
            os.killpg(prod.pid, signal.SIGKILL)
            prod.wait(10)
    assert session_members(prod.pid) == [], f"processes outlived the script:\n{tail(log)}"


@pytest.mark.usefixtures("nginx")
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_prod_stops_everything_and_fails_when_a_child_keeps_dying(redis_url: str, tmp_path: Path) -> None:
    # A supervisor above the script (systemd, a container runtime) must see the failure:
    # beat killed as often as the limit allows, the script stops the rest and exits 1.
    deadline = Deadline(BUDGET_SECONDS)
    port = free_port()
    log = tmp_path / "prod.log"
    env = dict(production_env(database_for_new_process(), redis_url, port, tmp_path), AIMON_RESTART_LIMIT="2")
    prod = start_prod(env, log)
    try:
        wait_for_health(port, deadline, prod, log)
        first = _members(prod)["beat"]
        os.kill(first, signal.SIGKILL)
        while (beat := _members(prod).get("beat")) in (None, first):
            deadline.check("waiting for beat to be started again")
            time.sleep(0.1)
        os.kill(beat, signal.SIGKILL)
        status = prod.wait(max(deadline.left(), 1))
    finally:
        if prod.poll() is None:
            os.killpg(prod.pid, signal.SIGKILL)
            prod.wait(10)
    assert status == 1, tail(log)
    output = log.read_text()
    assert re.search(r"prod: beat \(pid [0-9]+\) exited with status -9; starting it again in 0.5 s", output)
    assert re.search(
        r"prod: beat \(pid [0-9]+\) exited with status -9: 2 deaths within 120 s; stopping", output
    )
    assert session_members(prod.pid) == [], f"processes outlived the script:\n{tail(log)}"


def _get(port: int, path: str) -> tuple[int, str]:
    status, body, _ = _get_with_headers(port, path)
    return status, body


def _get_with_headers(port: int, path: str) -> tuple[int, str, dict[str, str]]:
    from http.client import HTTPConnection

    conn = HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read().decode()
        headers = {name.lower(): value for name, value in response.getheaders()}
    finally:
        conn.close()
    return response.status, body, headers
