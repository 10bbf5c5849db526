"""Helpers for the production-shape tests: real processes, real HTTP, bounded waits.

Everything here talks to processes it started over plain HTTP (http.client), the way a
balancer and a runtime would; nothing reaches into their memory.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
# What the parent test run may have set that must not leak into a production-like child.
_NOT_INHERITED = (
    "DJANGO_SETTINGS_MODULE",
    "CELERY_TASK_ALWAYS_EAGER",
    "DJANGO_DEBUG",
    "AIMON_DEMO",
    "DATABASE_URL",
    "REDIS_URL",
)


def child_env(**overrides: str) -> dict[str, str]:
    """This process's environment without the test run's own database, Redis and settings."""
    env = {key: value for key, value in os.environ.items() if key not in _NOT_INHERITED}
    env.update(overrides)
    return env


class Deadline:
    """One time budget for a whole test: every wait takes from it, none may outlive it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds

    def left(self) -> float:
        return self.ends - time.monotonic()

    def check(self, what: str) -> None:
        assert self.left() > 0, f"over the test's {self.seconds:.0f} s budget while {what}"


def wait_for_health(port: int, deadline: Deadline, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until GET /healthz answers 200 on `port`; fails at once if `process` has died."""
    while True:
        deadline.check(f"waiting for /healthz on port {port}")
        status = process.poll()
        assert status is None, f"exited with status {status} before serving:\n{tail(log)}"
        try:
            status_code, body = request_json(port, "GET", "/healthz", timeout=2)
        except OSError:
            time.sleep(0.2)
            continue
        if status_code == 200:
            assert body == {"status": "ok"}
            return
        time.sleep(0.2)


def request_json(
    port: int,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = None,
    timeout: float = 10,
) -> tuple[int, Any]:
    """One HTTP request on a fresh connection; the status and the parsed JSON answer."""
    conn = HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Accept": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    payload = None
    if body is not None:
        payload = json.dumps(body)
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    try:
        return response.status, json.loads(raw) if raw else None
    except ValueError:  # not JSON (an HTML error page): the text, for the failure message
        return response.status, raw.decode(errors="replace")[:500]


def decide(port: int, token: str, session_id: str, skills: list[str]) -> dict[str, tuple[str, str]]:
    """POST /api/v1/skill-decisions; {skill: (decision, source)}."""
    status, body = request_json(
        port, "POST", "/api/v1/skill-decisions", {"skills": skills, "session_id": session_id}, token=token
    )
    assert status == 200, (status, body)
    return {item["skill"]: (item["decision"], item["source"]) for item in body["decisions"]}


class BrowserSession:
    """A person signed in on one node over HTTP: the session cookie and CSRF, as a browser
    sends them (after benchmarks/click_to_unblocked.py's `Browser`)."""

    def __init__(self, port: int, username: str, password: str) -> None:
        self.port = port
        self.cookies: dict[str, str] = {}
        page = self.send("GET", "/accounts/login/")[1]
        match = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert match, "no CSRF token on the sign-in page"
        form = {"username": username, "password": password, "csrfmiddlewaretoken": match.group(1).decode()}
        status, _ = self.send("POST", "/accounts/login/", form)
        assert status == 302, f"signing in as {username} on port {port} answered {status}"
        assert "sessionid" in self.cookies

    def send(
        self, method: str, path: str, form: dict[str, str] | None = None, **headers: str
    ) -> tuple[int, bytes]:
        conn = HTTPConnection("127.0.0.1", self.port, timeout=15)
        all_headers = {
            "Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items()),
            "Referer": f"http://127.0.0.1:{self.port}/",
            **headers,
        }
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            all_headers["Content-Type"] = "application/x-www-form-urlencoded"
            all_headers["X-CSRFToken"] = self.cookies.get("csrftoken", "")
        try:
            conn.request(method, path, body=body, headers=all_headers)
            response = conn.getresponse()
            content = response.read()
        finally:
            conn.close()
        for header, value in response.getheaders():
            if header.lower() == "set-cookie":
                name, _, rest = value.partition("=")
                self.cookies[name.strip()] = rest.split(";", 1)[0]
        return response.status, content

    def click(self, request_id: str, answer: str) -> None:
        """The inbox button: an htmx POST answering every skill of the request."""
        status, content = self.send(
            "POST", f"/approvals/requests/{request_id}/answer/", {"answer": answer}, **{"HX-Request": "true"}
        )
        assert status == 200, (status, content[:300])


def start_node(port: int, database_url: str, redis_url: str, log: Path) -> subprocess.Popen[bytes]:
    """A web node: one uvicorn process on `port`, the test settings, the shared database and Redis."""
    env = child_env(
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        DJANGO_SETTINGS_MODULE="aimon_admin.settings.test",
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        CELERY_TASK_ALWAYS_EAGER="1",
        LOG_LEVEL="WARNING",
    )
    argv = [sys.executable, "-m", "uvicorn", "aimon_admin.asgi:application", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--lifespan", "off", "--no-access-log", "--log-level", "warning"]
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(process: subprocess.Popen[bytes], timeout: float = 15) -> int:
    """SIGTERM the process's whole group, SIGKILL what is left after `timeout`; its status."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.wait(5)


def session_members(session_id: int) -> list[tuple[int, str]]:
    """Every live process of a session (Linux /proc): (pid, command line). Zombies count as gone."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone while we looked
            continue
        # The command name (field 2) may hold spaces and parentheses: split after the last ")".
        fields = stat.rsplit(")", 1)[1].split()
        state, session = fields[0], int(fields[3])
        if session == session_id and state != "Z":
            members.append((int(entry.name), cmdline.strip()))
    return members


def tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
