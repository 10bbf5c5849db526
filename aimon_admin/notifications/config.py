"""`load_config`'s `webhooks` section: organisation-wide signed webhooks (P4), read with the
registry's configuration parser (every error at FILE:LINE, the whole file checked before
anything is written) and applied in the same transaction as the file's servers, tool subjects
and rules, all or nothing.

Format::

    webhooks:
      siem:                                   # the webhook's name
        url: https://siem.example/aimon       # where it is sent (checked as on the page)
        secret: whsec_…                       # optional: the receiver's Standard Webhooks secret
        events: [approval.requested, audit.checkpoint]   # optional; the approval.* ones by default

Without `secret` one is made, and `load_config` prints it once. The address is checked as the
notifications page checks it: a private, loopback or link-local address is refused unless
AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES allows it. A webhook the file names that exists already
with the same address, events (and secret, when the file gives one) is left as it is; one
that differs is refused, naming it: the file never changes a webhook silently (its secret is
rotated on the notifications page).

This is the top of the stack load_config reads: the registry's sections, approvals' rules,
then these (so the command lives in this app, the one that may read all three).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yaml.nodes import Node, SequenceNode

from aimon_admin.approvals import config as approvals_config
from aimon_admin.core.actors import Actor
from aimon_admin.core.encryption import is_unreadable
from aimon_admin.notifications import selectors, senders
from aimon_admin.notifications.choices import APPROVAL_EVENTS, EVENT_TYPES, WEBHOOK_EVENTS
from aimon_admin.notifications.models import CHANNEL_NAME_MAX
from aimon_admin.notifications.services import ChannelError, webhook_create, webhook_secret_problem
from aimon_admin.registry import config as registry_config
from aimon_admin.registry.config import Config, ConfigError, ConfigResult

WEBHOOK_KEYS = ("events", "secret", "url")
# The wire names a file uses (the `type` of a webhook's body), to the stored events.
EVENT_NAMES = {EVENT_TYPES[event]: str(event) for event in WEBHOOK_EVENTS}
WEBHOOK_CONFLICT = (
    "a webhook named {name!r} already exists with {what}; the file says otherwise: change the "
    "file, or remove the webhook on the notifications page first"
)
UNREADABLE_WHAT = "an address or secret no configured key decrypts"
NAME_PROBLEM = "a webhook's name is 1 to {limit} characters without control characters"


@dataclass(frozen=True)
class WebhookEntry:
    line: int
    name: str
    url: str
    secret: str | None  # None: one is made and printed once
    events: list[str] | None  # stored event values; None: the approval events


def _events(parser: Any, node: Node, where: str) -> list[str] | None:
    names = ", ".join(EVENT_NAMES)
    if not isinstance(node, SequenceNode) or not node.value:
        parser.error(node, f"{where}.events must be a list of one or more of {names}")
        return None
    chosen: list[str] = []
    for item in node.value:
        if not (parser.is_text(item) and item.value in EVENT_NAMES):
            parser.error(item, f"{where}.events: {parser.shown(item)} is not one of {names}")
            return None
        if EVENT_NAMES[item.value] in chosen:
            parser.error(item, f"{where}.events names {item.value} twice")
            return None
        chosen.append(EVENT_NAMES[item.value])
    return chosen


def _url(parser: Any, node: Node, where: str) -> str | None:
    url = parser.text(node, f"{where}.url")
    if url is None:
        return None
    try:
        senders.webhook_url_check(url.strip())  # the page's own check (SSRF guard included)
    except senders.SendError as exc:
        parser.error(node, f"{where}.url: {exc.message}")
        return None
    return url.strip()


def _webhooks(parser: Any, node: Node) -> list[WebhookEntry]:
    """webhooks: {name: {url, secret, events}, …}"""
    entries: list[WebhookEntry] = []
    for name, key_node, value in parser.mapping(node, "webhooks"):
        where = f"webhooks.{name}"
        if not name.strip() or len(name.strip()) > CHANNEL_NAME_MAX or any(ord(c) < 32 for c in name):
            parser.error(key_node, f"{where}: {NAME_PROBLEM.format(limit=CHANNEL_NAME_MAX)}")
            continue
        before = len(parser.errors)
        given: dict[str, Any] = {}
        for key, _key_node, item in parser.mapping(value, where, WEBHOOK_KEYS):
            if key == "url":
                given["url"] = _url(parser, item, where)
            elif key == "secret":
                # Errors name the line, never the value (as for a server's env and headers).
                secret = parser.text(item, f"{where}.secret", secret=True)
                if secret is not None and (problem := webhook_secret_problem(secret)):
                    parser.error(item, f"{where}.secret: {problem}")
                given["secret"] = secret
            else:
                given["events"] = _events(parser, item, where)
        if "url" not in given and len(parser.errors) == before:
            parser.error(value, f"{where} needs url")
        if len(parser.errors) > before:
            continue
        entries.append(
            WebhookEntry(
                parser.line_of(key_node), name.strip(), given["url"], given.get("secret"), given.get("events")
            )
        )
    return entries


SECTIONS = {**approvals_config.SECTIONS, "webhooks": _webhooks}


def config_read(path: str | Path) -> Config:
    """Read and check a whole configuration file: servers, tool subjects, rules and
    webhooks. Raises ConfigError listing every problem, each at its FILE:LINE."""
    return registry_config.config_read(path, sections=SECTIONS)


def config_parse(data: bytes | str, *, filename: str) -> Config:
    return registry_config.config_parse(data, filename=filename, sections=SECTIONS)


@dataclass
class Loaded:
    """What applying a file did, and the secrets made for its new webhooks: shown once by the
    command, never written to the audit log."""

    result: ConfigResult
    new_secrets: dict[str, str]


def config_apply(config: Config, *, actor: Actor) -> Loaded:
    """Apply the whole file in one transaction (registry, rules, then webhooks); any refusal
    applies nothing."""
    made: dict[str, str] = {}
    result = approvals_config.config_apply(
        config, actor=actor, then=lambda: _apply_webhooks(config, actor, made)
    )
    return Loaded(result=result, new_secrets=made)


def _apply_webhooks(config: Config, actor: Actor, made: dict[str, str]) -> dict[str, list[str]]:
    if "webhooks" not in config.extra:
        return {}
    created, unchanged = [], []
    for entry in config.extra["webhooks"]:
        where = f"{config.filename}:{entry.line}: webhooks.{entry.name}"
        existing = selectors.webhooks().filter(name=entry.name).first()
        if existing is not None:
            differs = _differs(existing.target, existing.events, existing.secret, entry)
            if differs:
                raise ConfigError([f"{where}: {WEBHOOK_CONFLICT.format(name=entry.name, what=differs)}"])
            unchanged.append(entry.name)
            continue
        try:
            _channel, secret = webhook_create(
                name=entry.name, url=entry.url, events=entry.events, secret=entry.secret, actor=actor
            )
        except ChannelError as exc:
            field = f".{exc.field}" if exc.field in WEBHOOK_KEYS else ""
            raise ConfigError([f"{where}{field}: {exc.message}"]) from exc
        if entry.secret is None:
            made[entry.name] = secret
        created.append(entry.name)
    return {"webhooks_created": created, "webhooks_unchanged": unchanged}


def _differs(target: str, events: list[str], secret: str, entry: WebhookEntry) -> str:
    """What the existing webhook has that the file does not say ("" when they agree)."""
    if is_unreadable(target, secret):
        return UNREADABLE_WHAT
    if target != entry.url:
        return "another address"
    if entry.events is not None and list(events) != [
        e for e in map(str, WEBHOOK_EVENTS) if e in entry.events
    ]:
        return "other events"
    if entry.events is None and list(events) != [str(e) for e in APPROVAL_EVENTS]:
        return "other events"
    if entry.secret is not None and not hmac.compare_digest(secret, entry.secret):
        return "another secret"
    return ""
