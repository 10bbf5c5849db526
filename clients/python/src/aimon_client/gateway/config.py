"""gateway.yaml: what the MCP gateway (G2) is told, read strictly.

Every problem is a `ConfigError` naming the file and the key (an unknown key included: a typo
such as ``wait_second`` must never silently fall back to a default). The runtime token is never
in the file: ``token_env`` names the environment variable that holds it.
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

DEFAULT_TOKEN_ENV = "AIMON_TOKEN"  # noqa: S105 - the variable's name, not a token
DEFAULT_TOOL_NAMES = "{server}__{tool}"
DEFAULT_WAIT_SECONDS = 300
MAX_WAIT_SECONDS = 86_400  # the product's own bound on a request's timeout
DEFAULT_SERVER_TIMEOUT = 60
SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

TOP_KEYS = ("product_url", "token_env", "principal", "tool_names", "wait_seconds", "servers", "secrets")
SERVER_KEYS = ("command", "args", "env", "cwd", "url", "headers", "timeout_seconds")
SECRET_KEYS = ("env", "headers")

PROBLEM = "{source}: `{key}` {problem}"
NO_TOKEN = (
    "the environment variable {name} (named by `token_env`) is not set or empty: put the runtime "  # noqa: S105
    "token there (an operator issues one on the runtime's page in AIMON Admin)"
)


class ConfigError(Exception):
    """gateway.yaml (or the environment it names) is not usable; the message names the key."""


@dataclass(frozen=True)
class UpstreamConfig:
    """One MCP server behind the gateway: a command (stdio) or a URL (Streamable HTTP)."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: int = DEFAULT_SERVER_TIMEOUT

    @property
    def transport(self) -> str:
        return "STDIO" if self.command else "STREAMABLE_HTTP"


@dataclass(frozen=True)
class GatewayConfig:
    product_url: str
    token: str
    token_env: str = DEFAULT_TOKEN_ENV
    principal: str | None = None
    tool_names: str = DEFAULT_TOOL_NAMES
    wait_seconds: int = DEFAULT_WAIT_SECONDS
    # None: the product's MCP server configs for this runtime (``servers: product``).
    servers: tuple[UpstreamConfig, ...] | None = None
    # With ``servers: product``: what the product never serves (env, headers), by server name.
    secrets: Mapping[str, Mapping[str, Mapping[str, str]]] = field(default_factory=dict)

    @property
    def from_product(self) -> bool:
        return self.servers is None


class _Check:
    """Reads one mapping of the file; each problem names the key, dotted from the top."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(PROBLEM.format(source=self.source, key=key, problem=problem))

    def mapping(self, key: str, value: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a mapping, not {_kind(value)}")
        for name in value:
            if not isinstance(name, str):
                raise self.fail(key, f"has a key that is not text: {name!r}")
            if name not in allowed:
                raise self.fail(_join(key, name), f"is not a known key (known: {', '.join(allowed)})")
        return value

    def text(self, key: str, value: Any, *, limit: int = 2000) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be non-empty text, not {_kind(value)}")
        if len(value) > limit or any(ord(ch) < 32 for ch in value):
            raise self.fail(key, f"must be at most {limit} characters with no control characters")
        return value

    def integer(self, key: str, value: Any, low: int, high: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise self.fail(key, f"must be a whole number from {low} to {high}, not {value!r}")
        return value

    def strings(self, key: str, value: Any) -> dict[str, str]:
        mapping = self.mapping(key, value if value is not None else {}, tuple(value or ()))
        out = {}
        for name, item in mapping.items():
            if not isinstance(item, str | int | float) or isinstance(item, bool):
                raise self.fail(_join(key, name), f"must be text, not {_kind(item)}")
            out[name] = str(item)
        return out

    def url(self, key: str, value: Any) -> str:
        text = self.text(key, value)
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise self.fail(key, f"must be an http:// or https:// address, not {text!r}")
        return text.rstrip("/")


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"[:80]


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def check_tool_names(check: _Check, value: Any) -> str:
    """The naming pattern must hold {server} and {tool} once each and no other field (G2)."""
    pattern = check.text("tool_names", value, limit=200)
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(pattern) if name is not None]
    except ValueError as exc:
        raise check.fail("tool_names", f"is not a valid pattern ({exc})") from exc
    if sorted(fields) != ["server", "tool"]:
        raise check.fail("tool_names", f"must hold {{server}} and {{tool}} once each, not {pattern!r}")
    return pattern


def _upstream(check: _Check, name: Any, value: Any) -> UpstreamConfig:
    key = f"servers.{name}"
    if not isinstance(name, str) or not SERVER_NAME.match(name):
        raise check.fail(key, "is not a server name (letters, digits, '.', '_' or '-', at most 100)")
    entry = check.mapping(key, value, SERVER_KEYS)
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise check.fail(key, "must have exactly one of `command` (stdio) or `url` (Streamable HTTP)")
    timeout = entry.get("timeout_seconds", DEFAULT_SERVER_TIMEOUT)
    common = {
        "name": name,
        "timeout_seconds": check.integer(f"{key}.timeout_seconds", timeout, 1, 3600),
    }
    if has_command:
        for other in ("url", "headers"):
            if other in entry:
                raise check.fail(f"{key}.{other}", "belongs to a `url` server, not a `command` one")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str | int | float) for a in args):
            raise check.fail(f"{key}.args", "must be a list of text")
        cwd = entry.get("cwd")
        return UpstreamConfig(
            command=check.text(f"{key}.command", entry["command"]),
            args=tuple(str(a) for a in args),
            env=check.strings(f"{key}.env", entry.get("env")),
            cwd=None if cwd is None else check.text(f"{key}.cwd", cwd),
            **common,
        )
    for other in ("args", "env", "cwd"):
        if other in entry:
            raise check.fail(f"{key}.{other}", "belongs to a `command` server, not a `url` one")
    return UpstreamConfig(
        url=check.url(f"{key}.url", entry["url"]),
        headers=check.strings(f"{key}.headers", entry.get("headers")),
        **common,
    )


def parse_config(data: Any, *, source: str, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """The gateway's configuration from the parsed YAML `data`; ConfigError names the key."""
    environ = os.environ if environ is None else environ
    check = _Check(source)
    top = check.mapping("", data, TOP_KEYS)
    if "product_url" not in top:
        raise check.fail("product_url", "is missing: the address of AIMON Admin, e.g. http://127.0.0.1:8000")
    product_url = check.url("product_url", top["product_url"])
    token_env = check.text("token_env", top.get("token_env", DEFAULT_TOKEN_ENV), limit=200)
    token = environ.get(token_env, "").strip()
    if not token:
        raise check.fail("token_env", NO_TOKEN.format(name=token_env))
    principal = top.get("principal")
    if principal is not None:
        principal = check.text("principal", principal, limit=200)
    tool_names = check_tool_names(check, top.get("tool_names", DEFAULT_TOOL_NAMES))
    wait = check.integer("wait_seconds", top.get("wait_seconds", DEFAULT_WAIT_SECONDS), 1, MAX_WAIT_SECONDS)
    if "servers" not in top:
        raise check.fail("servers", "is missing: `product` (the product's MCP server configs) or a mapping")
    raw_servers = top["servers"]
    servers: tuple[UpstreamConfig, ...] | None
    if raw_servers == "product":
        servers = None
    elif isinstance(raw_servers, dict) and raw_servers:
        servers = tuple(_upstream(check, name, value) for name, value in raw_servers.items())
    else:
        raise check.fail(
            "servers", f"must be `product` or a non-empty mapping of servers, not {_kind(raw_servers)}"
        )
    secrets: dict[str, dict[str, dict[str, str]]] = {}
    if "secrets" in top:
        if servers is not None:
            raise check.fail("secrets", "is only for `servers: product`; put env and headers in each server")
        for name, value in check.mapping("secrets", top["secrets"], tuple(top["secrets"] or ())).items():
            entry = check.mapping(f"secrets.{name}", value, SECRET_KEYS)
            secrets[name] = {k: check.strings(f"secrets.{name}.{k}", entry.get(k)) for k in SECRET_KEYS}
    return GatewayConfig(
        product_url=product_url,
        token=token,
        token_env=token_env,
        principal=principal,
        tool_names=tool_names,
        wait_seconds=wait,
        servers=servers,
        secrets=secrets,
    )


def load_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read and check gateway.yaml at `path`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: is not valid YAML{where} ({getattr(exc, 'problem', exc)})") from exc
    return parse_config(data, source=str(path), environ=environ)
