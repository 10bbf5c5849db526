"""The chat, phone and mail services a channel's notification URL may name, and every host each
makes this server connect to (P6).

A service is accepted only where every connection it makes is known from its URL and the
notification library's own code: the host the URL names (a self-hosted ntfy, Gotify,
Mattermost or Matrix server, a JSON, XML or form endpoint), a mail server (the URL's smtp=
option, or the one its domain implies), or the service's fixed public address (Slack, Discord,
Telegram, Pushover, ntfy.sh, t2bot.io). Each is checked where it is used (senders), and the
send connects to nothing else (pinning). Any other service is refused: among them those that
reach hosts a server's answer names (another service's API, a discovered home server), talk
other protocols (MQTT, XMPP, syslog, SMPP ...) or read files on this server; and so are the
options of accepted ones that would (a message template=, encrypted mail's keys). No accepted
service takes a proxy from its URL; the environment's proxies are not used (pinning).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from apprise import AppriseAttachment
from apprise.plugins.custom_form import NotifyForm
from apprise.plugins.custom_json import NotifyJSON
from apprise.plugins.custom_xml import NotifyXML
from apprise.plugins.discord import NotifyDiscord
from apprise.plugins.email import NotifyEmail
from apprise.plugins.gotify import NotifyGotify
from apprise.plugins.matrix import NotifyMatrix
from apprise.plugins.matrix.base import MatrixWebhookMode
from apprise.plugins.mattermost import NotifyMattermost
from apprise.plugins.ntfy import NotifyNtfy, NtfyMode
from apprise.plugins.pushover import NotifyPushover
from apprise.plugins.slack import NotifySlack, SlackMode
from apprise.plugins.telegram import NotifyTelegram

SCHEME_MESSAGE = (
    "{scheme}:// is not accepted: this server cannot check every address that service would "
    "connect to. Accepted: {schemes}."
)
EMAIL_KEYS_MESSAGE = (
    "Encrypted mail (the URL's pgp=, pgppub=, pgpprv= or wkd= option) is not accepted: it reads "
    "key files on this server or looks keys up on other hosts."
)
TEMPLATE_MESSAGE = (
    "The URL's template= option is not accepted: it reads a file on this server or fetches one "
    "from another host."
)
MAIL_SERVER_OPTION = "the mail server, smtp="
MAIL_SERVER = "the mail server"
# The library sends t2bot.io webhooks here (a constant in its code, not a class attribute).
T2BOT_URL = "https://webhooks.t2bot.io/api/v1/matrix/hook/"


class NotAccepted(Exception):
    """A URL this server does not send to, whatever its addresses; `message` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Host:
    """One host a send connects to: its name as the library will look it up, the port, what
    it is where the URL names it by an option, and whether it is the service's own address."""

    name: str
    port: int
    role: str = ""
    fixed: bool = False

    @property
    def shown(self) -> str:
        """How messages name it: the host, and the option that named it."""
        return f"{self.name} ({self.role})" if self.role else self.name


def _url_host(plugin: Any) -> list[Host]:
    """The host and port the URL names (the scheme's default port: 443 for the secure one)."""
    return [Host(str(plugin.host), int(plugin.port or (443 if plugin.secure else 80)))]


def _service(url: str) -> Host:
    parts = urlsplit(url)
    return Host(str(parts.hostname), parts.port or 443, fixed=True)


def _fixed(attribute: str) -> Callable[[Any, dict[str, Any]], list[Host]]:
    """A service whose every request goes to the address in the library's `attribute`."""
    return lambda plugin, _parsed: [_service(getattr(type(plugin), attribute))]


def _ntfy(plugin: Any, _parsed: dict[str, Any]) -> list[Host]:
    if plugin.mode == NtfyMode.CLOUD:
        return [_service(type(plugin).cloud_notify_url)]
    return _url_host(plugin)


SLACK_URLS = {
    SlackMode.WEBHOOK: "webhook_url",
    SlackMode.WEBHOOK_GOV: "webhook_gov_url",
    SlackMode.WORKFLOW: "workflow_url",
    SlackMode.WORKFLOW_TRIGGER: "workflow_trigger_url",
    SlackMode.BOT: "api_url",
}


def _slack(plugin: Any, _parsed: dict[str, Any]) -> list[Host]:
    return [_service(getattr(type(plugin), SLACK_URLS[plugin.mode]))]


def _matrix(plugin: Any, _parsed: dict[str, Any]) -> list[Host]:
    """The home server the URL names (or t2bot.io's webhooks); never one a server's answer
    names: discovery (.well-known) is switched off."""
    plugin.discovery = False
    if plugin.mode == MatrixWebhookMode.T2BOT:
        return [_service(T2BOT_URL)]
    return _url_host(plugin)


def _email(plugin: Any, parsed: dict[str, Any]) -> list[Host]:
    """The mail server: the smtp= option, else the one the domain implies, else the domain."""
    if plugin.pgp_mode != "no" or plugin.use_wkd or plugin.pgp_key or plugin.pgp_privkey:
        raise NotAccepted(EMAIL_KEYS_MESSAGE)
    role = MAIL_SERVER_OPTION if parsed.get("smtp_host") else MAIL_SERVER
    return [Host(str(plugin.smtp_host), int(plugin.port), role=role)]


ACCEPTED: dict[type, Callable[[Any, dict[str, Any]], list[Host]]] = {
    NotifyJSON: lambda plugin, _parsed: _url_host(plugin),
    NotifyXML: lambda plugin, _parsed: _url_host(plugin),
    NotifyForm: lambda plugin, _parsed: _url_host(plugin),
    NotifyNtfy: _ntfy,
    NotifyGotify: lambda plugin, _parsed: _url_host(plugin),
    NotifyMattermost: lambda plugin, _parsed: _url_host(plugin),
    NotifyMatrix: _matrix,
    NotifyEmail: _email,
    NotifySlack: _slack,
    NotifyDiscord: _fixed("notify_url"),
    NotifyTelegram: _fixed("notify_url"),
    NotifyPushover: _fixed("notify_url"),
}


def accepted_schemes() -> list[str]:
    """Every scheme an accepted service answers to (json, jsons, ntfys, slack ...)."""
    schemes: set[str] = set()
    for service in ACCEPTED:
        for attribute in (service.protocol, service.secure_protocol):
            if attribute:
                schemes.update([attribute] if isinstance(attribute, str) else attribute)
    return sorted(schemes)


def check_service(scheme: str, service: type) -> None:
    """Refuse a service not accepted (NotAccepted names the scheme and the accepted ones)."""
    if service not in ACCEPTED:
        schemes = ", ".join(f"{name}://" for name in accepted_schemes())
        raise NotAccepted(SCHEME_MESSAGE.format(scheme=scheme, schemes=schemes))


def hosts(plugin: Any, parsed: dict[str, Any]) -> list[Host]:
    """Every host sending with `plugin` (made from the URL `parsed`) connects to; NotAccepted
    for an option that would read a file here or fetch one (a message template: Slack,
    Discord, Telegram)."""
    check_service(str(parsed.get("schema", "")), type(plugin))
    template = getattr(plugin, "template", None)
    if "template" in (parsed.get("qsd") or {}) or (isinstance(template, AppriseAttachment) and len(template)):
        raise NotAccepted(TEMPLATE_MESSAGE)
    return ACCEPTED[type(plugin)](plugin, parsed)
