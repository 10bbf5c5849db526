"""The runtime's page: how to connect it through an enforcement point (G1-G3), and which one
last called and when, for every role."""

from __future__ import annotations

import datetime as dt
import html
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from aimon_client.gateway.config import load_config
from django.utils import timezone
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.core.actors import Actor
from aimon_admin.registry.choices import McpTransport
from aimon_admin.registry.services import mcp_server_create
from aimon_admin.runtimes import connect, enforcement
from aimon_admin.runtimes.choices import EnforcementPoint
from aimon_admin.runtimes.models import AgentRuntime, EnforcementPointCall
from aimon_admin.runtimes.services import runtime_retire, token_issue
from aimon_admin.runtimes.tokens import token_hash
from tests.accounts.factories import logged_in
from tests.conftest import TEST_ACTOR
from tests.runtimes.factories import bearer_client

pytestmark = pytest.mark.django_db

PAGE = "/runtimes/agent-one/"


@pytest.fixture(autouse=True)
def fresh_process() -> None:
    enforcement.forget()


def snippet(page: str, element_id: str) -> str:
    """The text of the <pre> with this id, as a browser would copy it."""
    match = re.search(rf'<pre class="json" id="{element_id}" tabindex="0">(.*?)</pre>', page, re.S)
    assert match, element_id
    return html.unescape(match.group(1))


def servers(*names_and_transports: tuple[str, str], enabled: bool = True) -> None:
    actor = Actor.system("pytest")
    for name, transport in names_and_transports:
        where = (
            {"command": "uvx", "args": [name]}
            if transport == McpTransport.STDIO
            else {"url": "https://m.example/mcp"}
        )
        mcp_server_create(name=name, actor=actor, transport=transport, enabled=enabled, **where)


def test_an_operator_gets_a_ready_gateway_yaml_naming_the_served_servers(
    runtime: AgentRuntime, operator: User
) -> None:
    # G2: the product's address, the token by its variable, servers from the product.
    servers(("git", McpTransport.STDIO), ("docs", McpTransport.STREAMABLE_HTTP))
    servers(("switched-off", McpTransport.STDIO), enabled=False)
    page = logged_in(operator).get(PAGE).content.decode()
    text = snippet(page, "connect-gateway-yaml")
    assert yaml.safe_load(text) == {
        "product_url": "http://testserver",
        "token_env": "AIMON_TOKEN",
        "tool_names": "{server}__{tool}",
        "wait_seconds": 300,
        "servers": "product",
    }
    assert "#   docs  Streamable HTTP\n#   git   stdio (a local command)\n" in text
    assert "switched-off" not in text  # a disabled server is served to no runtime
    assert "# principal: alice" in text
    assert 'data-copy="connect-gateway-yaml"' in page


def test_with_no_server_yet_the_yaml_says_where_to_add_one(runtime: AgentRuntime, operator: User) -> None:
    text = snippet(logged_in(operator).get(PAGE).content.decode(), "connect-gateway-yaml")
    assert "#   none yet: register one under MCP servers" in text
    assert yaml.safe_load(text)["servers"] == "product"


def test_the_hook_snippets_and_the_install_command(runtime: AgentRuntime, operator: User) -> None:
    # G3: the documented settings entry, and an environment a shell runs as it is.
    page = logged_in(operator).get(PAGE).content.decode()
    assert json.loads(snippet(page, "connect-hook-settings")) == {
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "*",
                    "hooks": [{"type": "command", "command": "aimon-claude-hook", "timeout": 60}],
                }
            ]
        }
    }
    environment = snippet(page, "connect-hook-environment")
    shown = subprocess.run(  # our own snippet, in a shell of its own
        [
            "/bin/bash",
            "-c",
            environment + 'printf "%s|%s|%s|%s" "$AIMON_URL" "$AIMON_HOOK_WAIT_SECONDS" '
            '"$AIMON_HOOK_NO_ANSWER" "${AIMON_PRINCIPAL-unset}"',
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown == "http://testserver|50|deny|unset"
    assert snippet(page, "connect-install") == "pip install ./clients/python"
    for element_id in ("connect-install", "connect-hook-settings", "connect-hook-environment"):
        assert f'data-copy="{element_id}"' in page
    client = logged_in(operator)
    for name, anchor in (
        ("mcp-gateway", "configure"),
        ("claude-code-hook", "configure"),
        ("runtime-client", "use"),
    ):
        assert f'href="/help/{name}/#{anchor}"' in page
        assert f'id="{anchor}"' in client.get(f"/help/{name}/").content.decode()


def test_the_page_never_holds_a_token(runtime: AgentRuntime, operator: User) -> None:
    _, plaintext = token_issue(runtime=runtime, actor=TEST_ACTOR, label="laptop")
    page = logged_in(operator).get(PAGE).content.decode()
    assert plaintext not in page
    assert token_hash(plaintext) not in page
    assert "<this runtime's token>" in snippet(page, "connect-hook-environment")


def test_the_product_url_is_the_base_url_setting(runtime: AgentRuntime, operator: User, settings) -> None:
    settings.AIMON_BASE_URL = "https://aimon.example.org/admin"
    page = logged_in(operator).get(PAGE).content.decode()
    assert (
        yaml.safe_load(snippet(page, "connect-gateway-yaml"))["product_url"]
        == "https://aimon.example.org/admin"
    )
    assert "export AIMON_URL=https://aimon.example.org/admin\n" in snippet(page, "connect-hook-environment")


def test_an_odd_base_url_stays_one_value_in_yaml_and_shell(
    runtime: AgentRuntime, operator: User, settings
) -> None:
    settings.AIMON_BASE_URL = "http://h:1/a b#c'$(touch x)"
    page = logged_in(operator).get(PAGE).content.decode()
    assert yaml.safe_load(snippet(page, "connect-gateway-yaml"))["product_url"] == settings.AIMON_BASE_URL
    shown = subprocess.run(  # our own snippet, in a shell of its own
        ["/bin/bash", "-c", snippet(page, "connect-hook-environment") + 'printf "%s" "$AIMON_URL"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown == settings.AIMON_BASE_URL


def test_which_point_last_called_and_when(runtime: AgentRuntime, operator: User, runtime_token: str) -> None:
    # A real call through the API with the gateway's User-Agent, then the page.
    response = bearer_client(runtime_token).post(
        "/api/v1/tool-decisions", {"tool": "Bash"}, format="json", HTTP_USER_AGENT="aimon-gateway/0.1.0"
    )
    assert response.status_code == 200
    EnforcementPointCall.objects.create(
        runtime=runtime,
        point=EnforcementPoint.CLAUDE_HOOK,
        product="aimon-claude-hook/0.1.0",
        last_called_at=timezone.now() - dt.timedelta(minutes=3, seconds=5),
    )
    page = logged_in(operator).get(PAGE).content.decode()
    section = page[page.index('id="runtime-points"') :]
    gateway = (
        r'<dt>MCP gateway</dt>\s*<dd data-point="GATEWAY">last call <time [^>]*>less than a minute ago</time>'
    )
    assert re.search(gateway + r' <span class="muted">\(aimon-gateway/0.1.0\)</span>', section)
    assert re.search(r'<dd data-point="CLAUDE_HOOK">last call <time [^>]*>3\xa0minutes ago</time>', section)
    assert '<dd data-point="CLIENT">never called</dd>' in section
    assert "OTHER" not in section  # shown once another program has called


def test_another_caller_is_shown_once_it_has_called(
    runtime: AgentRuntime, auditor: User, api: APIClient
) -> None:
    assert api.get("/api/v1/tools", HTTP_USER_AGENT="curl/8.5.0").status_code == 200
    page = logged_in(auditor).get(PAGE).content.decode()
    other = (
        r'<dt>Other caller</dt>\s*<dd data-point="OTHER">last call <time [^>]*>less than a minute ago</time>'
    )
    assert re.search(other + r' <span class="muted">\(curl/8.5.0\)</span>', page)


def test_auditors_see_the_readings_but_not_how_to_connect(runtime: AgentRuntime, auditor: User) -> None:
    response = logged_in(auditor).get(PAGE)
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="runtime-points"' in page
    assert 'id="runtime-connect"' not in page
    assert "connect-gateway-yaml" not in page


def test_approvers_never_reach_the_page(runtime: AgentRuntime, approver: User) -> None:
    assert logged_in(approver).get(PAGE).status_code == 403


def test_a_retired_runtime_offers_no_way_to_connect(runtime: AgentRuntime, operator: User) -> None:
    runtime_retire(runtime=runtime, actor=TEST_ACTOR)
    page = logged_in(operator).get(PAGE).content.decode()
    assert 'id="runtime-connect"' not in page
    assert 'id="runtime-points"' in page


def test_the_copy_buttons_need_no_script_but_the_products_own(runtime: AgentRuntime, operator: User) -> None:
    # The page's policy holds: scripts only from our own static files (the copy buttons are
    # app.js's), none inline, none fetched from elsewhere.
    response = logged_in(operator).get(PAGE)
    page = response.content.decode()
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    scripts = re.findall(r"<script[^>]*>", page)
    assert scripts
    assert all(re.search(r'\ssrc="/static/', tag) for tag in scripts), scripts
    assert page.count("data-copy=") == 4


def test_the_yaml_lists_servers_with_the_provider_the_registry_registered() -> None:
    # The registry provides the list when ready (runtimes may not import it).
    servers(("git", McpTransport.STDIO))
    assert connect.mcp_servers() == [connect.McpServerEntry(name="git", transport="stdio (a local command)")]


def test_the_gateway_reads_the_page_s_yaml_as_it_is(
    runtime: AgentRuntime, operator: User, tmp_path: Path
) -> None:
    # G2: the file as copied from the page is one the gateway starts with, once the token's
    # variable is set: the product's address, the servers fetched from the product.
    servers(("git", McpTransport.STDIO))
    path = tmp_path / "gateway.yaml"
    path.write_text(
        snippet(logged_in(operator).get(PAGE).content.decode(), "connect-gateway-yaml"), encoding="utf-8"
    )
    config = load_config(path, environ={"AIMON_TOKEN": "aimon_example"})
    assert (config.product_url.rstrip("/"), config.token, config.principal) == (
        "http://testserver",
        "aimon_example",
        None,
    )
    assert config.from_product
