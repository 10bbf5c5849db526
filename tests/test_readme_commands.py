"""Every management command the README shows runs as written: each line of its shell code
blocks that starts with `.venv/bin/python manage.py` or `AIMON_DEMO=1 .venv/bin/python
manage.py`, run in a subprocess on a scratch copy of `make run`'s database (a temporary
SQLite file with the demo data), ends with status 0 and no traceback. A line whose comment
says it exits non-zero on purpose is left out. The files the lines name (servers.yaml,
export.jsonl) are made in the temporary folder the commands run in.

A line runs with what its block gives it: `AIMON_DEMO=1` only where the line says so, and
the production environment (a secret key, no demo) only in a block that exports
`DJANGO_SECRET_KEY`, as the production section's does. So a line without either fails here
as it fails for a reader (`DJANGO_SECRET_KEY is required…`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aimon_admin.core.encryption import new_key

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHELL_BLOCK = re.compile(r"^```(?:sh|bash|shell)\n(.*?)^```", re.M | re.S)
COMMAND = re.compile(r"^(?:AIMON_DEMO=1 )?\.venv/bin/python manage\.py ")
ON_PURPOSE = "non-zero on purpose"
# Each command starts Django once: a few seconds, far less on a warm machine.
COMMAND_TIMEOUT = 60
# What the production section's block exports, as far as a management command needs it.
PRODUCTION = {"DJANGO_SECRET_KEY": "readme-commands-test-key", "DJANGO_ALLOWED_HOSTS": "aimon.example.com"}
# What the README's commands read from their folder.
SERVERS_YAML = """\
mcpServers:
  git:
    command: uvx
    args: [mcp-server-git]
"""
# The demo data, loaded in a child process whose settings point the credentials file into the
# temporary folder (the command otherwise rewrites the developer's own), then the whole audit
# log exported as JSON Lines, as the auditor's Export writes it.
PREPARE = """
import sys, django
django.setup()
from pathlib import Path
from django.conf import settings
from django.core.management import call_command
from aimon_admin.audit.export import jsonl_line
from aimon_admin.audit.models import AuditEvent
settings.DEMO_CREDENTIALS_FILE = Path(sys.argv[1]) / "demo-credentials.json"
call_command("migrate", interactive=False, verbosity=0)
call_command("demo_data", url="http://127.0.0.1:8000/", verbosity=0)
with open(Path(sys.argv[1]) / "export.jsonl", "w", encoding="utf-8") as out:
    for event in AuditEvent.objects.order_by("seq"):
        out.write(jsonl_line(event.content(), event.hash))
"""


def readme_commands(text: str) -> list[tuple[str, bool]]:
    """The management command lines of the README's shell blocks, continuation lines joined,
    each with whether its block exports the production environment."""
    lines = []
    for block in SHELL_BLOCK.findall(text):
        joined = block.replace("\\\n", " ")
        production = re.search(r"^export .*\bDJANGO_SECRET_KEY=", joined, re.M) is not None
        for line in joined.splitlines():
            if COMMAND.match(line.strip()) and ON_PURPOSE not in line:
                lines.append((line.strip(), production))
    return lines


def test_the_readme_shows_commands_for_both_databases() -> None:
    commands = readme_commands(README.read_text())
    assert any(line.startswith("AIMON_DEMO=1 ") and not production for line, production in commands)
    assert any(line.startswith(".venv/") and production for line, production in commands)
    for name in ("create_user", "create_runtime", "load_config", "verify_audit"):
        assert any(f"manage.py {name}" in line for line, _production in commands), name


def _environment(folder: Path) -> dict[str, str]:
    """The caller's environment without its database, Redis, Celery, Django or AIMON
    settings, on a SQLite file in the folder."""
    prefixes = ("DATABASE_", "REDIS_", "CELERY_", "DJANGO_", "AIMON_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(
        DJANGO_SETTINGS_MODULE="aimon_admin.settings.base",
        DATABASE_URL=f"sqlite:///{folder / 'db.sqlite3'}",
        AIMON_AUDIT_SIGNING_KEY="",
        # The stored secrets' key, as make run's demo key or production's environment gives it.
        AIMON_SECRETS_KEY=new_key(),
        AIMON_AUDIT_CHECKPOINT_DIR=str(folder / "audit-checkpoints"),
        PYTHONPATH=str(ROOT),
    )
    return env


@pytest.mark.sqlite_run
def test_every_management_command_in_the_readme_runs(tmp_path: Path) -> None:
    env = _environment(tmp_path)
    subprocess.run(
        [sys.executable, "-c", PREPARE, str(tmp_path)],
        cwd=ROOT,
        env={**env, "AIMON_DEMO": "1"},
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT * 2,
    )
    (tmp_path / "servers.yaml").write_text(SERVERS_YAML)
    failures = []
    for line, production in readme_commands(README.read_text()):
        # As written, in the folder holding its files; .venv/bin/python is this interpreter.
        command = line.replace(".venv/bin/python manage.py", f"{sys.executable} {ROOT / 'manage.py'}", 1)
        result = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env={**env, **PRODUCTION} if production else env,
            input="a long pass phrase\n",  # for --password-stdin without a here-string
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
        output = result.stdout + result.stderr
        if result.returncode != 0 or "Traceback (most recent call last)" in output:
            failures.append(f"{line}\n  exit {result.returncode}: {output.strip()[-600:]}")
    assert failures == []
