"""Secrets never in logs or the audit log (A1: "never a secret").

One run does everything that handles a secret — sign-in with the right and a wrong
password, a runtime token issued on the page and used on the API (and a wrong token),
MCP servers created on the page with an environment secret (stdio, one server even
echoing it on its stderr) and a header secret (streamable HTTP), each synced — while every
log record at DEBUG is captured, from every logger (Django's own do not propagate to the
root, so the capture is attached to them too). Then no record, no audit event and no
sign-in failure record may hold any of the plaintexts.

SQL statements are not in scope: Django logs them only with DEBUG on (development).
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.test import Client
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.choices import McpTransport
from aimon_admin.registry.models import McpServer, McpSyncRun
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.tokens import PREFIX_SHOWN
from tests.conftest import PASSWORD
from tests.registry.mcp_servers import catalog
from tests.registry.mcp_servers.http import serve_http

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
WRONG_PASSWORD = "wrong-pass-phrase-5e1d7c"
WRONG_TOKEN = "aimon_WrongTokenWrongTokenWrong0b9e44"
ENV_SECRET = "env-secret-4c6a91f0"
LEAKED_SECRET = "stderr-secret-77d2e8"
HEADER_SECRET = "header-secret-a83b5d"


class Everything(logging.Handler):
    """Keeps every record, formatted, with its arguments and extras."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []
        self.formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
        self.lines.append(repr(record.args))
        self.lines.append(repr({k: v for k, v in record.__dict__.items() if k not in {"args", "msg"}}))


@pytest.fixture
def all_logs() -> Iterator[Everything]:
    """Every logger at DEBUG into one handler, for the whole test."""
    handler = Everything()
    loggers = [logging.getLogger()] + [
        logger for logger in logging.root.manager.loggerDict.values() if isinstance(logger, logging.Logger)
    ]
    saved = [(logger, logger.level, logger.disabled) for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
        logger.disabled = False
        if logger is logging.getLogger() or not logger.propagate:
            logger.addHandler(handler)
    yield handler
    for logger, level, disabled in saved:
        logger.setLevel(level)
        logger.disabled = disabled
        if handler in logger.handlers:
            logger.removeHandler(handler)


def sign_in(client: Client, username: str, password: str) -> int:
    return client.post(reverse("accounts:login"), {"username": username, "password": password}).status_code


def create_server(client: Client, **fields: Any) -> McpServer:
    data = {
        "timeout_seconds": 20,
        "enabled": "on",
        "command": "",
        "args": "",
        "env": "",
        "url": "",
        "headers": "",
    }
    data.update(fields)
    response = client.post(reverse("registry:server-create"), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    return McpServer.objects.get(name=fields["name"])


def sync(client: Client, server: McpServer, capture: Callable[..., Any]) -> McpSyncRun:
    with capture(execute=True):
        response = client.post(reverse("registry:server-sync", args=[server.name]))
    assert response.status_code in (200, 302)
    return McpSyncRun.objects.filter(server=server).latest("pk")


def test_no_password_token_or_mcp_secret_in_any_log_or_audit_event(
    all_logs: Everything,
    operator: User,
    runtime: AgentRuntime,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    client = Client()
    # Sign-in: a wrong password, then the right one.
    assert sign_in(client, operator.username, WRONG_PASSWORD) == 303  # back to the form, errors kept
    assert sign_in(client, operator.username, PASSWORD) == 302

    # A token issued on the page, used on the API; a wrong token tried.
    page = client.post(reverse("runtimes:token-issue", args=[runtime.name]), {"label": "ci"}, follow=True)
    assert page.status_code == 200
    (token,) = set(re.findall(r"aimon_[A-Za-z0-9_-]{20,}", page.content.decode()))
    api = Client()
    assert api.get("/api/v1/runtime", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
    decided = api.post(
        "/api/v1/skill-decisions",
        json.dumps({"skills": ["deploy"], "session_id": "s-log", "principal": operator.username}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert decided.status_code == 200
    assert api.get("/api/v1/runtime", HTTP_AUTHORIZATION=f"Bearer {WRONG_TOKEN}").status_code == 401

    # MCP servers with an environment secret (stdio) and a header secret (HTTP), synced.
    stdio = create_server(
        client,
        name="with-env",
        transport=McpTransport.STDIO,
        command=sys.executable,
        args="-m\ntests.registry.mcp_servers.catalog",
        env=f"PYTHONPATH={ROOT}\nAPI_TOKEN={ENV_SECRET}",
    )
    assert sync(client, stdio, django_capture_on_commit_callbacks).status == "SUCCEEDED"
    leaky = create_server(
        client,
        name="leaks-env",
        transport=McpTransport.STDIO,
        command=sys.executable,
        args="-m\ntests.registry.mcp_servers.misbehaving\n--mode\nleak-secret",
        env=f"PYTHONPATH={ROOT}\nAPI_TOKEN={LEAKED_SECRET}",
    )
    assert sync(client, leaky, django_capture_on_commit_callbacks).status == "FAILED"
    with serve_http(catalog.build_server()) as url:
        http = create_server(
            client,
            name="with-header",
            transport=McpTransport.STREAMABLE_HTTP,
            url=url,
            headers=f"Authorization: Bearer {HEADER_SECRET}",
        )
        assert sync(client, http, django_capture_on_commit_callbacks).status == "SUCCEEDED"

    secrets = {
        "password": PASSWORD,
        "wrong password": WRONG_PASSWORD,
        "token": token,
        "token's hidden part": token[PREFIX_SHOWN:],
        "wrong token": WRONG_TOKEN,
        "env secret": ENV_SECRET,
        "leaked env secret": LEAKED_SECRET,
        "header secret": HEADER_SECRET,
    }
    logs = "\n".join(all_logs.lines)
    # The capture saw the run: axes' failure record, the 401, the sync tasks, the HTTP client.
    assert "AXES: New login failure" in logs
    loggers = {line.split(" ", 1)[0] for line in all_logs.lines[::3]}
    assert {"django.request", "celery.app.trace", "mcp.client.streamable_http"} <= loggers
    audit = "\n".join(
        f"{e.actor_label} {e.subject} {e.session_key} {json.dumps(e.details)}"
        for e in AuditEvent.objects.all()
    )
    assert "LOGIN_FAILED" in set(AuditEvent.objects.values_list("action", flat=True))
    attempts = "\n".join(f"{a.get_data} {a.post_data}" for a in AccessAttempt.objects.all())
    for where, text in (("logs", logs), ("audit events", audit), ("axes attempts", attempts)):
        leaked = [name for name, value in secrets.items() if value in text]
        assert leaked == [], f"{where} hold: {', '.join(leaked)}"
