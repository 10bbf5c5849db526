"""The embedded demo (`make run`): `demo_data` and the AIMON_DEMO settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import RequestKind, RequestStatus
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.runtimes.selectors import token_authenticate

pytestmark = pytest.mark.django_db
ROOT = Path(django_settings.BASE_DIR)


@pytest.fixture
def demo(settings: Any, tmp_path: Path) -> Path:
    settings.DEMO = True
    settings.DEMO_CREDENTIALS_FILE = tmp_path / "credentials.json"
    return settings.DEMO_CREDENTIALS_FILE


def test_demo_data_refuses_outside_the_demo(settings: Any, tmp_path: Path) -> None:
    # Never against a production database by accident.
    settings.DEMO = False
    settings.DEBUG = False
    settings.DEMO_CREDENTIALS_FILE = tmp_path / "credentials.json"
    with pytest.raises(CommandError, match="AIMON_DEMO=1"):
        call_command("demo_data")
    assert not User.objects.exists()
    assert not settings.DEMO_CREDENTIALS_FILE.exists()


def test_demo_data_gives_each_kind_of_user_something_to_click(demo: Path) -> None:
    call_command("demo_data", stdout=open(os.devnull, "w"))  # noqa: SIM115 - closed with the process
    saved = json.loads(demo.read_text())
    assert demo.stat().st_mode & 0o777 == 0o600
    for username in ("operator", "approver", "auditor"):
        assert User.objects.get(username=username).check_password(saved[username])
    token = token_authenticate(saved["token"])
    assert token is not None
    pending = ApprovalRequest.objects.filter(runtime=token.runtime, status=RequestStatus.PENDING)
    skills = pending.filter(kind=RequestKind.SKILL)
    # S1: one from a session, one from a fork of it, one with no session at all.
    assert sorted((r.session_id is not None, r.invoking_session_id is not None) for r in skills) == [
        (False, False),
        (False, True),
        (True, False),
    ]
    # U2: and a tool call that asks: Bash on the trusted shell server, its subject the command.
    tool = pending.get(kind=RequestKind.TOOL)
    assert (tool.tool, tool.server, tool.subject_argument, tool.subject) == (
        "Bash",
        "shell",
        "command",
        "git push origin main",
    )
    assert tool.session is not None


def test_demo_data_twice_keeps_the_same_people_token_and_requests(demo: Path) -> None:
    call_command("demo_data", stdout=open(os.devnull, "w"))  # noqa: SIM115
    first = json.loads(demo.read_text())
    requests = set(ApprovalRequest.objects.values_list("pk", flat=True))
    call_command("demo_data", stdout=open(os.devnull, "w"))  # noqa: SIM115
    assert json.loads(demo.read_text()) == first
    assert set(ApprovalRequest.objects.values_list("pk", flat=True)) == requests


def test_the_demo_runs_without_debug_and_without_a_secret_key() -> None:
    # The demo's error pages are the product's own, never Django's debug pages.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "AIMON_", "DATABASE_"))}
    env.update(AIMON_DEMO="1", DJANGO_SETTINGS_MODULE="aimon_admin.settings.base", PYTHONPATH=str(ROOT))
    code = (
        "from django.conf import settings as s; "
        "print(s.DEBUG, s.DEMO, s.WHITENOISE_USE_FINDERS, s.SESSION_COOKIE_SECURE, sorted(s.ALLOWED_HOSTS))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert shown == "False True True False ['127.0.0.1', '[::1]', 'localhost']"
    env.pop("AIMON_DEMO")
    refused = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0
    assert "DJANGO_SECRET_KEY is required unless AIMON_DEMO" in refused.stderr
