"""`make run` verifies the audit chain before it serves: there is no Celery beat under the
embedded default, and the audit home said "Never verified" for good."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.audit.verification import last_verification

ROOT = Path(__file__).resolve().parents[2]
VERIFY = "manage.py verify_audit --from-checkpoint --record"


def run_recipe() -> list[str]:
    """The commands of the Makefile's `run` target, in order."""
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^run:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.M)
    assert recipe is not None, "no run target in the Makefile"
    return [line.strip() for line in recipe.group(1).splitlines() if not line.strip().startswith("@#")]


def test_make_run_verifies_the_chain_after_the_demo_data_and_before_serving() -> None:
    steps = run_recipe()
    demo = next(i for i, step in enumerate(steps) if "manage.py demo_data" in step)
    verify = next(i for i, step in enumerate(steps) if VERIFY in step)
    serve = next(i for i, step in enumerate(steps) if "uvicorn" in step)
    assert demo < verify < serve
    # A broken chain is the audit home's news; it must not stop the demo from starting.
    assert steps[verify].startswith("-")


@pytest.mark.django_db
def test_after_that_step_the_audit_home_shows_a_real_status(settings: Any, tmp_path: Path) -> None:
    settings.DEMO = True
    settings.DEMO_CREDENTIALS_FILE = tmp_path / "credentials.json"
    call_command("demo_data", stdout=open(os.devnull, "w"))  # noqa: SIM115 - closed with the process
    call_command("verify_audit", "--from-checkpoint", "--record", stdout=io.StringIO())
    last = last_verification()
    assert last is not None
    assert last.ok
    client = Client()
    client.force_login(User.objects.get(username="auditor"))
    html = client.get("/audit/").content.decode()
    assert "Never verified" not in html
    assert '<span class="badge badge-ok">Verified</span>' in html
