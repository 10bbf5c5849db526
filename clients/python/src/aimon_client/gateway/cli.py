"""``aimon-gateway --config gateway.yaml [--http HOST:PORT]``: the MCP gateway (G2).

Serves MCP on stdin/stdout by default (an MCP client starts it as a command), or Streamable
HTTP at ``http://HOST:PORT/mcp`` with ``--http``. Problems before serving (the file, the
token, the product unreachable when the servers come from it) are one line on stderr and
exit status 2; nothing is served on a guess.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import anyio
import uvicorn

from aimon_client.client import Client
from aimon_client.errors import AimonError
from aimon_client.gateway.config import ConfigError, GatewayConfig, UpstreamConfig, load_config
from aimon_client.gateway.server import USER_AGENT, Gateway
from aimon_client.gateway.stdio import serve_stdio

logger = logging.getLogger("aimon_client.gateway")

EXIT_CONFIG = 2
NO_SERVERS = (
    "AIMON Admin serves no enabled MCP server to this runtime; there is nothing to put behind the gateway"
)
SERVERS_UNKNOWN = "cannot read the MCP servers from AIMON Admin: {reason}"
SECRET_FOR_NOTHING = "`secrets.{name}`: AIMON Admin has no enabled MCP server of that name; ignored"  # noqa: S105 - a message, not a secret
BAD_HTTP = "--http must be HOST:PORT (e.g. 127.0.0.1:8765), not {value!r}"


class StartupError(Exception):
    """The gateway cannot start serving; the message says why."""


async def product_servers(client: Client, config: GatewayConfig) -> list[UpstreamConfig]:
    """``servers: product``: the product's MCP server configs for this runtime, with the env and
    headers the product never serves taken from ``secrets``."""
    try:
        listed = await client.mcp_servers()
    except AimonError as exc:
        raise StartupError(SERVERS_UNKNOWN.format(reason=exc.reason)) from exc
    if not listed:
        raise StartupError(NO_SERVERS)
    names = {server.name for server in listed}
    for name in sorted(set(config.secrets) - names):
        logger.warning(SECRET_FOR_NOTHING.format(name=name))
    out = []
    for server in listed:
        secret = config.secrets.get(server.name, {})
        stdio = server.transport == "STDIO"
        out.append(
            UpstreamConfig(
                name=server.name,
                command=server.command if stdio else "",
                args=tuple(server.args) if stdio else (),
                env=dict(secret.get("env", {})) if stdio else {},
                url="" if stdio else server.url,
                headers={} if stdio else dict(secret.get("headers", {})),
                timeout_seconds=server.timeout_seconds,
            )
        )
    return out


def parse_http(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(BAD_HTTP.format(value=value))
    return host.strip("[]"), int(port)


async def serve(config: GatewayConfig, http: tuple[str, int] | None) -> None:
    async with Client(config.product_url, config.token, user_agent=USER_AGENT) as client:
        upstreams = (
            list(config.servers) if config.servers is not None else await product_servers(client, config)
        )
        gateway = Gateway(config, client, upstreams)
        server = gateway.build_server()
        async with anyio.create_task_group() as tasks:
            await gateway.start(tasks)
            if http is None:
                async with serve_stdio() as (read_stream, write_stream):
                    await server.run(read_stream, write_stream, server.create_initialization_options())
            else:
                host, port = http
                app = server.streamable_http_app(host=host)
                web = uvicorn.Server(
                    uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
                )
                logger.warning("aimon-gateway serving MCP at http://%s:%d/mcp", host, port)
                await web.serve()
            tasks.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="aimon-gateway", description="An MCP server in front of MCP servers, governed by AIMON Admin."
    )
    parser.add_argument("--config", required=True, help="gateway.yaml")
    parser.add_argument(
        "--http", type=parse_http, metavar="HOST:PORT", help="serve Streamable HTTP, not stdio"
    )
    args = parser.parse_args(argv)
    # stdout carries MCP on stdio: everything the gateway says goes to stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="aimon-gateway: %(message)s")
    try:
        config = load_config(args.config)
        anyio.run(serve, config, args.http)
    except (ConfigError, StartupError) as exc:
        print(f"aimon-gateway: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
