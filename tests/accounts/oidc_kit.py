"""A real OpenID Connect provider for the sign-in tests (tests/accounts/oidc_provider: npm
`oidc-provider`, pinned with its lock file, installed there with `npm ci` on first use), and
the settings that point AIMON Admin at it.

The provider runs as a process of its own on a port of this run's block (tests/ports.py). Its
people and their groups are a JSON file it reads at every request: a test changes someone's
groups, or has the next ID token go out tampered or expired, by writing it
(`Provider.set_user`, `Provider.id_token`). Without Node.js the tests skip saying so (a failure
with AIMON_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import requests
from django.test import Client

from tests.conftest import skip_or_fail
from tests.ports import free_port

FOLDER = Path(__file__).resolve().parent / "oidc_provider"
CLIENT_ID = "aimon-admin"
CLIENT_SECRET = "aimon-admin-test-client-secret"
SCOPES = "openid profile email groups"
ROLE_MAP = {"aimon-operators": ["operator"], "aimon-approvers": ["approver"], "aimon-auditors": ["auditor"]}
PROVIDER_NAME = "Test provider"
START_SECONDS = 30
TEST_CALLBACK = "http://testserver/accounts/oidc/callback/"


def _installed() -> bool:
    """node_modules holds exactly the versions package-lock.json pins."""
    lock = json.loads((FOLDER / "package-lock.json").read_text())
    for name in lock["packages"][""]["dependencies"]:
        manifest = FOLDER / "node_modules" / name / "package.json"
        if not manifest.exists():
            return False
        pinned = lock["packages"][f"node_modules/{name}"]["version"]
        if json.loads(manifest.read_text())["version"] != pinned:
            return False
    return True


def install() -> None:
    """`npm ci` in the provider's folder when its packages are missing or stale; one run at a
    time (make test's two runs may both get here first)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        skip_or_fail("node and npm are not installed: the test OpenID Connect provider cannot run")
    with open(FOLDER / ".npm-ci.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _installed():
            return
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=FOLDER, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0 or not _installed():
            skip_or_fail(f"npm ci of the test OpenID Connect provider failed: {done.stderr.strip()[-300:]}")


@dataclass
class Provider:
    issuer: str
    state_file: Path
    log: Path
    state: dict[str, Any] = field(default_factory=lambda: {"users": {}, "id_token": "normal"})

    def _write(self) -> None:
        self.state_file.write_text(json.dumps(self.state))

    def set_user(self, login: str, password: str, groups: list[str] | None, email: str = "") -> None:
        """A person at the provider; `groups` None sends no groups claim at all."""
        user: dict[str, Any] = {"password": password, "email": email or f"{login}@example.test"}
        if groups is not None:
            user["groups"] = groups
        self.state["users"][login] = user
        self._write()

    def id_token(self, mode: str) -> None:
        """How the next ID tokens go out: "normal", "tampered" or "expired"."""
        self.state["id_token"] = mode
        self._write()


@contextmanager
def running_provider(tmp: Path, redirect_uris: list[str]) -> Iterator[Provider]:
    install()
    port = free_port()
    provider = Provider(
        issuer=f"http://127.0.0.1:{port}", state_file=tmp / "provider.json", log=tmp / "provider.log"
    )
    provider._write()
    with open(provider.log, "w") as log:
        process = subprocess.Popen(
            ["node", "provider.js", str(port), str(provider.state_file), *redirect_uris],
            cwd=FOLDER,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the test provider exited: {provider.log.read_text()[-2000:]}")
            try:
                if requests.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the test provider did not answer in {START_SECONDS} s")
            time.sleep(0.1)
        yield provider
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def oidc_settings(settings: Any, issuer: str, *, password: bool = True, role_map: Any = None) -> None:
    """Point AIMON Admin at `issuer` as AIMON_OIDC_* would (pytest-django's `settings`)."""
    settings.AIMON_OIDC_ISSUER = issuer
    settings.AIMON_OIDC_ENABLED = True
    settings.AIMON_OIDC_ENDPOINTS = dict.fromkeys(("authorization", "token", "userinfo", "jwks"), "")
    settings.AIMON_OIDC_CLIENT_ID = CLIENT_ID
    settings.AIMON_OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.AIMON_OIDC_SCOPES = SCOPES
    settings.AIMON_OIDC_ROLE_MAP = ROLE_MAP if role_map is None else role_map
    settings.AIMON_OIDC_PROVIDER_NAME = PROVIDER_NAME
    settings.AIMON_OIDC_TIMEOUT_SECONDS = 3
    settings.AIMON_PASSWORD_SIGN_IN = password
    backends = ["axes.backends.AxesStandaloneBackend", "aimon_admin.accounts.oidc.OidcBackend"]
    if password:
        backends.append("django.contrib.auth.backends.ModelBackend")
    settings.AUTHENTICATION_BACKENDS = backends


def sign_in_through(client: Client, provider: Provider, login: str, password: str) -> Any:
    """The whole code flow with Django's test client: its start, the provider's own login form
    (posted over HTTP, as a browser would), and the callback; the callback's response."""
    start = client.get("/accounts/oidc/start/")
    assert start.status_code == 302, start
    location = start["Location"]
    assert location.startswith(provider.issuer), location
    browser = requests.Session()
    answer = browser.get(location, allow_redirects=False, timeout=10)
    for _ in range(10):
        if answer.is_redirect:
            location = urljoin(answer.url, answer.headers["Location"])
            if location.startswith("http://testserver/"):
                return client.get(location.removeprefix("http://testserver"))
            answer = browser.get(location, allow_redirects=False, timeout=10)
        elif answer.status_code == 200 and 'name="login"' in answer.text:
            assert "Wrong username or password" not in answer.text, "the provider refused the password"
            action = answer.text.split('action="', 1)[1].split('"', 1)[0]
            answer = browser.post(
                urljoin(answer.url, action),
                data={"login": login, "password": password},
                allow_redirects=False,
            )
        else:
            raise AssertionError(
                f"unexpected answer from the provider: {answer.status_code} {answer.text[:300]}"
            )
    raise AssertionError("the provider never sent the browser back")
