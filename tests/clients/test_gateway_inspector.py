"""A third-party MCP client through the gateway (G2): MCP Inspector's CLI (npm
`@modelcontextprotocol/inspector-cli`, command `mcp-inspector-cli`), pinned in
tests/clients/js/package.json and package-lock.json and installed with `npm ci` into
.venv/node-clients when missing or stale. Without node and npm the test skips, saying so
(a failure with AIMON_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.core.actors import Actor
from tests.clients.gateway_kit import (
    GATEWAY,
    gateway_http,
    git_repo,
    register_real_servers,
    write_config,
)
from tests.conftest import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
PINNED = ROOT / "tests" / "clients" / "js"
INSTALLED = ROOT / ".venv" / "node-clients"
PACKAGE = INSTALLED / "node_modules" / "@modelcontextprotocol" / "inspector-cli"


@pytest.fixture(scope="session")
def inspector() -> Path:
    """The pinned MCP Inspector CLI, installed from the lock file when missing or stale."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        skip_or_fail("node and npm are not installed: MCP Inspector's CLI cannot run")
    lock = PINNED / "package-lock.json"
    current = (INSTALLED / "package-lock.json").exists() and filecmp.cmp(
        lock, INSTALLED / "package-lock.json"
    )
    if not current or not (PACKAGE / "build" / "cli.js").exists():
        INSTALLED.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(PINNED / name, INSTALLED / name)
        done = subprocess.run(
            ["npm", "ci", "--prefix", str(INSTALLED), "--no-audit", "--no-fund"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            skip_or_fail(f"npm ci of MCP Inspector's CLI failed: {done.stderr.strip()[-300:]}")
    return INSTALLED / "node_modules" / ".bin" / "mcp-inspector-cli"


def inspect(inspector: Path, *args: str) -> Any:
    """One Inspector CLI run; its JSON answer. It runs from its own build folder, where it
    finds its own package.json (it looks it up from the working directory)."""
    done = subprocess.run(
        [str(inspector), "--cli", *args],
        cwd=PACKAGE / "build",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout[done.stdout.index("{") :])


@pytest.mark.django_db(transaction=True)
def test_mcp_inspector_lists_and_calls_tools_through_the_gateway(
    inspector: Path, live_server: LiveServer, runtime_token: str, operator: User, tmp_path: Path
) -> None:  # G2
    repo = git_repo(tmp_path / "repo")
    register_real_servers(Actor.for_user(operator), repo)
    config = write_config(tmp_path / "gateway.yaml", live_server.url, principal="alice")
    # Inspector's own config file, as its users write one: the gateway is a stdio server.
    servers = tmp_path / "inspector.json"
    gateway = {
        "command": GATEWAY,
        "args": ["--config", str(config)],
        "env": {"AIMON_TEST_TOKEN": runtime_token},
    }
    servers.write_text(json.dumps({"mcpServers": {"aimon": gateway}}))
    stdio = ["--config", str(servers), "--server", "aimon"]

    listed = inspect(inspector, *stdio, "--method", "tools/list")
    names = {tool["name"] for tool in listed["tools"]}
    assert {"git__git_status", "git__git_reset", "time__get_current_time"} <= names

    called = inspect(
        inspector,
        *stdio,
        "--method",
        "tools/call",
        "--tool-name",
        "git__git_status",
        "--tool-arg",
        f"repo_path={repo}",
    )
    assert called["isError"] is False
    assert "Repository status" in called["content"][0]["text"]

    # Over Streamable HTTP too; a destructive call with nobody to answer is refused in words.
    with gateway_http(
        write_config(config, live_server.url, principal="alice", wait_seconds=2), runtime_token
    ) as gw:
        http = [gw.url, "--transport", "http"]
        assert {
            tool["name"] for tool in inspect(inspector, *http, "--method", "tools/list")["tools"]
        } == names
        refused = inspect(
            inspector,
            *http,
            "--method",
            "tools/call",
            "--tool-name",
            "git__git_reset",
            "--tool-arg",
            f"repo_path={repo}",
        )
    assert refused["isError"] is True
    assert refused["content"][0]["text"].startswith("Refused: ")
