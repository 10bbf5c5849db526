"""What the runtime's page shows to connect an agent through an enforcement point (G1-G3):
a ready gateway.yaml (G2), the Claude Code hook's settings and environment (G3), and the
one command that installs both with the client library (G1).

Never the token: only its hash is kept, so every snippet names where it goes instead. The
MCP servers listed in gateway.yaml are the registry's, but runtimes may not import the
registry (tests/test_layers.py): as core.home does for the home's sections, the registry
provides them when it is ready (its AppConfig.ready), and the page asks.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

INSTALL_COMMAND = "pip install ./clients/python"
TOKEN_ENV = "AIMON_TOKEN"  # noqa: S105 - the variable's name, not a secret # nosec B105
WAIT_SECONDS = 300
HOOK_WAIT_SECONDS = 50
HOOK_TIMEOUT_SECONDS = 60
# A value YAML reads as the plain string it is; anything else is written as a JSON string,
# which YAML reads the same.
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@%+~-]*")


@dataclass(frozen=True)
class McpServerEntry:
    """One MCP server the product serves the runtime: its name and transport's words."""

    name: str
    transport: str


McpServers = Callable[[], Sequence[McpServerEntry]]
_mcp_servers: McpServers | None = None


def provide_mcp_servers(provider: McpServers) -> None:
    """Register what lists the MCP servers served to runtimes (the registry, when ready)."""
    global _mcp_servers
    _mcp_servers = provider


def mcp_servers() -> list[McpServerEntry]:
    """The MCP servers the product serves a runtime (every enabled one), by name; none when
    no app provides them."""
    return list(_mcp_servers()) if _mcp_servers is not None else []


def _scalar(value: str) -> str:
    return value if _PLAIN.fullmatch(value) else json.dumps(value)


def gateway_yaml(*, runtime_name: str, product_url: str, servers: Sequence[McpServerEntry]) -> str:
    """A gateway.yaml for this runtime: the product's address, the token by the variable that
    holds it, the principal as a commented placeholder, and `servers: product` (the gateway
    fetches the servers' configs from the product), with the servers it will get listed."""
    lines = [
        f"# aimon-gateway --config gateway.yaml   (runtime {runtime_name})",
        f"product_url: {_scalar(product_url)}",
        f"token_env: {TOKEN_ENV}            # the variable holding this runtime's token",
        "# principal: alice             # optional: the person the agent acts for",
        'tool_names: "{server}__{tool}"  # how upstream tools are named to the client',
        f"wait_seconds: {WAIT_SECONDS}             # how long an ASK waits for a person's answer",
        "servers: product               # the MCP servers the product serves this runtime:",
    ]
    if servers:
        width = max(len(server.name) for server in servers)
        lines += [f"#   {server.name.ljust(width)}  {server.transport}" for server in servers]
    else:
        lines.append("#   none yet: register one under MCP servers")
    return "\n".join(lines) + "\n"


def hook_settings() -> str:
    """The `hooks` entry of .claude/settings.json that runs the hook before every tool."""
    settings = {
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "*",
                    "hooks": [
                        {"type": "command", "command": "aimon-claude-hook", "timeout": HOOK_TIMEOUT_SECONDS}
                    ],
                }
            ]
        }
    }
    return json.dumps(settings, indent=2) + "\n"


def hook_environment(*, product_url: str) -> str:
    """The hook's environment, as shell lines: the token and principal as placeholders."""
    return (
        "\n".join(
            [
                f"export AIMON_URL={shlex.quote(product_url)}",
                f'export {TOKEN_ENV}="<this runtime\'s token>"',
                '# export AIMON_PRINCIPAL="alice"       # optional: the person the agent acts for',
                f"export AIMON_HOOK_WAIT_SECONDS={HOOK_WAIT_SECONDS}    # below the hook's timeout "
                f"({HOOK_TIMEOUT_SECONDS} s)",
                "export AIMON_HOOK_NO_ANSWER=deny       # or ask: hand the question to the terminal",
            ]
        )
        + "\n"
    )
