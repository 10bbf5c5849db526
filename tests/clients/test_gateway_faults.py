"""The MCP gateway fails closed (G2): a bad gateway.yaml, the product unreachable, a 5xx, a
product answer the gateway does not understand, an unknown tool, an upstream that dies mid-call,
an upstream listing of 10,000 tools or with a 5 MB description. Each is a refusal in words (a
tool error, or one line on stderr at start), never a forwarded call, never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp.shared.exceptions import MCPError
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from tests.clients.gateway_kit import (
    GATEWAY,
    TIME_SERVER,
    free_port,
    gateway_env,
    over_stdio,
    register,
    text_of,
    write_config,
)

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-not-checked-by-a-dead-product"
TIME = {"command": TIME_SERVER, "args": ["--local-timezone", "UTC"]}
PYTHONPATH = {"PYTHONPATH": str(ROOT)}


def module_server(module: str, *args: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", module, *args], "env": PYTHONPATH}


# --- gateway.yaml ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "env", "named"),
    [
        ({"wait_second": 5}, {}, "`wait_second` is not a known key"),
        ({"servers": {"git": {"comand": "x"}}}, {}, "`servers.git.comand` is not a known key"),
        (
            {"servers": {"git": {"command": "x", "url": "http://a"}}},
            {},
            "`servers.git` must have exactly one",
        ),
        ({"wait_seconds": "soon"}, {}, "`wait_seconds` must be a whole number"),
        ({"tool_names": "{tool}"}, {}, "`tool_names` must hold {server} and {tool}"),
        ({"product_url": "ftp://x"}, {}, "`product_url` must be an http:// or https:// address"),
        ({"servers": "everything"}, {}, "`servers` must be `product` or a non-empty mapping"),
        (
            {"secrets": {"git": {"env": {}}}, "servers": {"t": TIME}},
            {},
            "`secrets` is only for `servers: product`",
        ),
        ({}, {"AIMON_TEST_TOKEN": ""}, "`token_env` the environment variable AIMON_TEST_TOKEN"),
    ],
)
def test_a_bad_gateway_yaml_is_one_line_naming_the_key(
    tmp_path: Path, settings: dict[str, Any], env: dict[str, str], named: str
) -> None:  # G2
    body = {"product_url": "http://127.0.0.1:9", "token_env": "AIMON_TEST_TOKEN", "servers": {"t": TIME}}
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({**body, **settings}))
    done = subprocess.run(
        [GATEWAY, "--config", str(config)],
        env={**gateway_env(TOKEN), **env},
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"aimon-gateway: {config}: ")
    assert named in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_yaml_that_does_not_parse_says_where(tmp_path: Path) -> None:  # G2
    config = tmp_path / "gateway.yaml"
    config.write_text("product_url: http://x\nservers: [unclosed\n")
    done = subprocess.run(
        [GATEWAY, "--config", str(config)], env=gateway_env(TOKEN), capture_output=True, text=True, timeout=30
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert "is not valid YAML at line" in done.stderr
    assert "Traceback" not in done.stderr


# --- the product cannot answer -----------------------------------------------------------------


class _Product(BaseHTTPRequestHandler):
    """What sits at the product's address when the product cannot answer: a balancer saying 502,
    or a product of another version answering in a shape this client does not know."""

    mode = "502"

    def _send(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.mode == "502":
            return self._send(502, {"error": "bad gateway"})
        tool = {
            "name": "get_current_time",
            "source": "MCP",
            "server": "t",
            "side_effect_level": "READ_ONLY",
            "destructive_behavior": "NON_DESTRUCTIVE",
            "idempotency_behavior": "IDEMPOTENT",
            "read_only": True,
            "description": "Get the time.",
            "input_schema": {"type": "object"},
        }
        return self._send(200, [tool])

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.mode == "502":
            return self._send(502, {"error": "bad gateway"})
        if self.path.startswith("/api/v1/tool-decisions"):
            return self._send(200, {"decision": "PERHAPS", "reason": "READ_ONLY_EXEMPT"})
        return self._send(200, [])

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def stand_in(mode: str) -> Iterator[str]:
    handler = type("Handler", (_Product,), {"mode": mode})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def call_time(config: Path) -> tuple[str, Any]:
    async def session() -> tuple[str, Any]:
        async with over_stdio(config, TOKEN) as client:
            try:
                await client.list_tools()
                listing = "listed"
            except MCPError as exc:
                listing = exc.error.message
            return listing, await client.call_tool("t__get_current_time", {"timezone": "UTC"})

    return anyio.run(session)


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("closed", "could not be reached"),
        ("502", "answered 502 after"),
        ("future", "is not what this client understands"),
    ],
)
def test_the_product_unable_to_answer_is_a_refusal_with_the_reason(
    tmp_path: Path, where: str, said: str
) -> None:
    # G2, G1: nothing decided, nothing forwarded; the reason reaches the client's model.
    with stand_in("502" if where == "502" else "future") as url:
        if where == "closed":
            url = f"http://127.0.0.1:{free_port()}"
        config = write_config(tmp_path / "gateway.yaml", url, servers={"t": TIME})
        listing, result = call_time(config)

    assert result.is_error
    assert said in text_of(result)
    assert text_of(result).startswith("Refused: ")
    assert "Traceback" not in text_of(result)
    if where != "future":
        assert said in listing  # tools/list fails with the same reason, never an empty guess
    stderr = config.with_suffix(".stderr").read_text()
    assert "Traceback" not in stderr


# --- against the product: the tool and the upstream ----------------------------------------------

live = pytest.mark.django_db(transaction=True)


@live
def test_an_unknown_tool_name_is_refused(live_server: LiveServer, runtime_token: str, tmp_path: Path) -> None:
    config = write_config(tmp_path / "gateway.yaml", live_server.url, servers={"t": TIME})

    async def session() -> list[Any]:
        async with over_stdio(config, runtime_token) as client:
            return [
                await client.call_tool(name, {})
                for name in ("t__no_such_tool", "nothing_like_a_tool", "other__get_current_time")
            ]

    names = ("t__no_such_tool", "nothing_like_a_tool", "other__get_current_time")
    for result, name in zip(anyio.run(session), names, strict=True):
        assert result.is_error  # G2
        assert (
            text_of(result)
            == f"Refused: {name!r} is not a tool this gateway serves (see tools/list); nothing was forwarded."
        )


@live
def test_an_upstream_that_dies_mid_call_is_a_refusal(
    live_server: LiveServer, runtime_token: str, operator: User, tmp_path: Path
) -> None:  # G2
    register(
        Actor.for_user(operator),
        "fragile",
        **module_server("tests.clients.gateway_servers", "--mode", "crash-on-call"),
    )
    config = write_config(
        tmp_path / "gateway.yaml", live_server.url, secrets={"fragile": {"env": PYTHONPATH}}
    )

    async def session() -> Any:
        async with over_stdio(config, runtime_token) as client:
            return await client.call_tool("fragile__explode", {})

    result = anyio.run(session)
    assert result.is_error
    assert text_of(result).startswith("Refused: the MCP server 'fragile' stopped while running explode")
    assert "Traceback" not in text_of(result)


@live
@pytest.mark.parametrize(
    ("server", "tool", "said"),
    [
        (
            module_server("tests.registry.mcp_servers.paginated", "--tools", "10000", "--page-size", "1000"),
            "big__tool_0001",
            "lists more than 2000 tools",
        ),
        (
            module_server("tests.clients.gateway_servers", "--mode", "huge-description"),
            "big__bloated",
            "far too large",
        ),
    ],
    ids=["10000-tools", "5MB-description"],
)
def test_an_upstream_listing_too_large_is_refused_and_never_relayed(
    live_server: LiveServer, runtime_token: str, tmp_path: Path, server: dict[str, Any], tool: str, said: str
) -> None:  # G2, T15
    config = write_config(tmp_path / "gateway.yaml", live_server.url, servers={"big": server, "t": TIME})

    async def session() -> tuple[list[str], Any]:
        async with over_stdio(config, runtime_token) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            return names, await client.call_tool(tool, {})

    names, result = anyio.run(session)
    assert not [name for name in names if name.startswith("big__")]
    assert result.is_error
    assert said in text_of(result)
    assert not AuditEvent.objects.filter(action=AuditAction.MCP_TOOLS_RELAYED, subject="big").exists()
