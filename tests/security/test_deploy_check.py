"""`manage.py check --deploy` under production settings.

Runs the real command in a child process with the production settings module
(aimon_admin.settings.base, not the test settings) and a production-like environment:
a long random secret key, debug off, HTTPS only (redirect, secure cookies, HSTS), and the
domain owner's two HSTS decisions made. It must report nothing at WARNING or above.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from aimon_admin.core.encryption import new_key

ROOT = Path(__file__).resolve().parents[2]


def production_env(tmp_path: Path, **overrides: str | None) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "AIMON_", "DATABASE_", "REDIS_", "CELERY_"))
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "aimon_admin.settings.base",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
            "DJANGO_ALLOWED_HOSTS": "aimon.example.com",
            "DJANGO_CSRF_TRUSTED_ORIGINS": "https://aimon.example.com",
            "DJANGO_SECURE_COOKIES": "1",
            "DJANGO_SSL_REDIRECT": "1",
            "DJANGO_HSTS_SECONDS": "31536000",
            "DJANGO_HSTS_INCLUDE_SUBDOMAINS": "0",
            "DJANGO_HSTS_PRELOAD": "0",
            "DJANGO_STATIC_ROOT": str(tmp_path / "static"),
            "DATABASE_URL": f"sqlite:///{tmp_path / 'deploy-check.sqlite3'}",
            "AIMON_SECRETS_KEY": new_key(),
        }
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_check_deploy_is_clean_under_production_settings(tmp_path: Path) -> None:
    result = check_deploy(production_env(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (2 silenced)." in result.stdout


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # The check is live: each unsafe production setting is reported.
        ({"DJANGO_HSTS_SECONDS": None}, "security.W004"),
        ({"DJANGO_SSL_REDIRECT": None}, "security.W008"),
        ({"DJANGO_SECURE_COOKIES": "0"}, "security.W012"),
        ({"DJANGO_SECRET_KEY": "short"}, "security.W009"),
        # An HSTS decision not made is still a reminder: only an explicit 0 silences it.
        ({"DJANGO_HSTS_INCLUDE_SUBDOMAINS": None}, "security.W005"),
        ({"DJANGO_HSTS_PRELOAD": None}, "security.W021"),
        # No key for the stored secrets, or one that is not a key: an error naming the setting.
        ({"AIMON_SECRETS_KEY": None}, "core.E001"),
        ({"AIMON_SECRETS_KEY": "not-a-key"}, "AIMON_SECRETS_KEY: key 1 is not a Fernet key"),
    ],
)
def test_check_deploy_reports_what_production_lacks(
    tmp_path: Path, overrides: dict[str, str | None], expected: str
) -> None:
    result = check_deploy(production_env(tmp_path, **overrides))
    assert result.returncode == 1
    assert expected in result.stderr + result.stdout
