"""The request log and the task log: one record each, in JSON under make prod (or text for
people), with who and what but never a token, a password or a cookie."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.tokens import default_token_generator
from django.test import Client
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.audit.tasks import VERIFY_TASK_NAME, verify_chain
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.settings.base import logging_config
from tests.conftest import PASSWORD

ROOT = Path(django_settings.BASE_DIR)
COOKIE_SECRET = "cookie-value-that-must-stay-out-of-logs"
QUERY_SECRET = "query-value-that-must-stay-out-of-logs"
WRONG_PASSWORD = "wrong-password-that-must-stay-out-of-logs"


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The server log as make prod writes it (AIMON_LOG_FORMAT=json, LOG_LEVEL=INFO), captured
    from the configured console handler itself; the test settings' logging put back after."""
    logging.config.dictConfig(logging_config("json", "INFO"))
    (handler,) = logging.getLogger().handlers
    assert isinstance(handler, logging.StreamHandler)
    stream = io.StringIO()
    handler.setStream(stream)
    try:
        yield stream
    finally:
        logging.config.dictConfig(django_settings.LOGGING)


def records(stream: io.StringIO) -> list[dict]:
    """Every line, each parsed as the JSON object it must be."""
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def request_records(stream: io.StringIO) -> list[dict]:
    return [r for r in records(stream) if r["logger"] == "aimon.requests"]


def test_an_api_call_logs_one_json_record_naming_its_runtime(
    json_log: io.StringIO, api: APIClient, runtime: AgentRuntime
) -> None:
    response = api.post(
        reverse("api:skill-decisions"), {"skills": ["deploy"], "session_id": "s-1"}, format="json"
    )
    assert response.status_code == 200

    (record,) = request_records(json_log)
    assert set(record) == {
        "time", "level", "logger", "message", "request_id",
        "method", "route", "status", "duration_ms", "runtime",
    }  # fmt: skip
    assert record["request_id"] == response["X-Request-ID"]
    assert (record["method"], record["route"]) == ("POST", "api:skill-decisions")
    assert record["message"].startswith("POST api:skill-decisions 200 ")
    assert record["message"].endswith(f" ms by {runtime.name}")
    assert (record["status"], record["runtime"], record["level"]) == (200, runtime.name, "INFO")
    assert isinstance(record["duration_ms"], float)
    assert record["time"].endswith("+00:00")


def test_a_page_logs_one_record_naming_the_person(json_log: io.StringIO, approver: User) -> None:
    client = Client()
    client.force_login(approver)
    response = client.get(reverse("core:home"))
    assert response.status_code == 200
    (record,) = request_records(json_log)
    assert (record["route"], record["status"], record["user"]) == ("core:home", 200, approver.username)
    assert "runtime" not in record
    assert record["request_id"] == response["X-Request-ID"]


def test_the_request_id_is_the_one_the_error_page_shows(json_log: io.StringIO, db: None) -> None:
    response = Client().get("/no-such-page/")
    assert response.status_code == 404
    (record,) = request_records(json_log)
    assert (record["status"], record["route"]) == (404, None)
    # Every record of the request carries it (Django's own "Not Found" line too).
    assert {r["request_id"] for r in records(json_log)} == {response["X-Request-ID"]}


def test_no_token_password_cookie_or_query_string_reaches_the_log(
    json_log: io.StringIO, runtime_token: str, approver: User
) -> None:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {runtime_token}")
    assert (
        api.post(
            reverse("api:skill-decisions"), {"skills": ["x"], "session_id": "s"}, format="json"
        ).status_code
        == 200
    )
    # A refused token: Django logs the 401 too.
    refused = APIClient()
    refused.credentials(HTTP_AUTHORIZATION=f"Bearer {runtime_token}x")
    assert refused.get(f"/api/v1/runtime?secret={QUERY_SECRET}").status_code == 401
    # A failed sign-in and a good one (the form's password in the body).
    client = Client()
    client.cookies["tracking"] = COOKIE_SECRET
    client.post(reverse("accounts:login"), {"username": approver.username, "password": WRONG_PASSWORD})
    client.post(reverse("accounts:login"), {"username": approver.username, "password": PASSWORD})
    assert client.get(reverse("core:home")).status_code == 200
    session_cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    # A set-password link: its token is in the path.
    link_token = default_token_generator.make_token(approver)
    uid = urlsafe_base64_encode(force_bytes(approver.pk))
    assert Client().get(reverse("accounts:set-password", args=[uid, link_token])).status_code in (200, 302)

    printed = json_log.getvalue()
    assert len(request_records(json_log)) == 6
    secrets = (
        runtime_token,
        WRONG_PASSWORD,
        PASSWORD,
        COOKIE_SECRET,
        session_cookie,
        QUERY_SECRET,
        link_token,
    )
    for secret in secrets:
        assert secret not in printed
    # The sign-ins are there, by route and name.
    assert [r["status"] for r in request_records(json_log) if r["route"] == "accounts:login"] == [303, 302]


@pytest.mark.django_db
def test_a_task_logs_one_record_under_its_own_request_id(json_log: io.StringIO) -> None:
    result = verify_chain.delay()  # eager under the test settings, as under make run
    task_records = [r for r in records(json_log) if r["logger"] == "aimon.tasks"]
    (record,) = task_records
    assert (record["task"], record["task_id"], record["state"]) == (VERIFY_TASK_NAME, result.id, "SUCCESS")
    assert record["request_id"] == f"task-{result.id}"
    assert isinstance(record["duration_ms"], float)
    # Celery's own "received" and "succeeded" lines would make it three.
    assert not [r for r in records(json_log) if r["logger"].startswith("celery")]


def _served_log(log_format: str | None, tmp_path: Path) -> str:
    """What a demo process (make run's settings) prints for one GET /healthz."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_", "CELERY_"))
    }
    env.update(AIMON_DEMO="1", DJANGO_SETTINGS_MODULE="aimon_admin.settings.base", LOG_LEVEL="INFO")
    env.update(DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    if log_format is not None:
        env["AIMON_LOG_FORMAT"] = log_format
    script = (
        "import django; django.setup()\n"
        "from django.test import Client\n"
        "assert Client(HTTP_HOST='127.0.0.1').get('/healthz').status_code == 200\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_the_demo_logs_plain_lines_for_people(tmp_path: Path) -> None:
    (line,) = _served_log(None, tmp_path).splitlines()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO aimon\.requests \[[0-9a-f]{32}\] "
        r"GET healthz 200 \d+\.\d ms",
        line,
    ), line


def test_aimon_log_format_json_switches_the_same_process_to_json(tmp_path: Path) -> None:
    (line,) = _served_log("json", tmp_path).splitlines()
    record = json.loads(line)
    assert (record["logger"], record["route"], record["status"]) == ("aimon.requests", "healthz", 200)


def test_an_unknown_log_format_is_refused_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="AIMON_LOG_FORMAT must be text or json, not 'xml'"):
        _served_log("xml", tmp_path)
