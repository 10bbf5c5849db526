"""Sending one message: email (Django's email framework), chat and phone channels (Apprise
URLs), signed webhooks (Standard Webhooks), each time-limited, never following a redirect,
and never to an address the operator forbids (server-side request forgery, P6: every host a
channel connects to, its options' included, checked when it is saved and again here, at every
send, and the connection made to the address checked).

A send either returns (the channel accepted it) or raises SendError with plain words for the
delivery log; nothing here writes to the database.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import apprise
import urllib3
from apprise.apprise import N_MGR
from apprise.plugins import url_to_dict
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMultiAlternatives, get_connection
from django.core.validators import validate_email
from django.template.loader import render_to_string
from standardwebhooks.webhooks import Webhook

from aimon_admin.notifications import apprise_hosts, pinning, policy

logger = logging.getLogger(__name__)

RESPONSE_EXCERPT_BYTES = 200

URL_SCHEME_MESSAGE = "A webhook address starts with https:// or http://."
URL_HOST_MESSAGE = "The address names no host."
URL_UNREADABLE_MESSAGE = "This is not an address this server can read: {problem}"
HOST_NOT_FOUND_MESSAGE = "{host} could not be found (no DNS record)."
APPRISE_UNKNOWN_MESSAGE = (
    "The notification library does not understand this URL. It starts with the service's "
    "scheme, such as ntfys://, slack://, discord://, matrix:// or json://."
)
EMAIL_INVALID_MESSAGE = "Enter an email address such as alice@example.com."
REDIRECT_MESSAGE = "The receiver answered {status}, a redirect to {location}; redirects are not followed."
STATUS_MESSAGE = "The receiver answered {status}{excerpt}."
TIMEOUT_MESSAGE = "The receiver did not answer within {seconds} seconds."
CONNECT_MESSAGE = "Could not connect to {host}: {problem}"
APPRISE_FAILED_MESSAGE = "The channel refused the message: {problem}"
APPRISE_UNCHECKED_MESSAGE = (
    "The service tried to connect to {host}, which was not checked for this channel; this "
    "server did not connect there."
)
APPRISE_LOCAL_MESSAGE = (
    "This URL notifies the server AIMON Admin runs on (its desktop or system log), not you. "
    "Use a chat, phone or email service's URL."
)
# The library's senders that never leave this machine: a desktop notification, the local
# system log. None of them reaches a person; refused.
APPRISE_LOCAL_ONLY = frozenset(
    {"NotifyWindows", "NotifyMacOSX", "NotifyDBus", "NotifyGLib", "NotifyGnome", "NotifySyslog"}
)


class SendError(Exception):
    """A send that did not reach the channel; `refused` when this server refused to try."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.refused = refused


@dataclass(frozen=True)
class Outgoing:
    """What to send: the message in words, and for webhooks the JSON body and its id."""

    title: str
    text: str
    url: str = ""  # the one link, for channels that show it as a button
    webhook_body: dict[str, object] | None = None
    message_id: str = ""
    html: str = ""


# --- Where we may send ------------------------------------------------------------------------------


def _timeout() -> float:
    return float(settings.AIMON_NOTIFY_TIMEOUT_SECONDS)


def own_addresses() -> list[tuple[str, int | None]]:
    """The product's own host:port pairs: its public address, and every name it answers to
    in production (any port)."""
    own: list[tuple[str, int | None]] = []
    base = settings.AIMON_BASE_URL
    if base:
        parts = urlsplit(base)
        if parts.hostname:
            own.append((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)))
    for name in settings.ALLOWED_HOSTS:
        name = name.strip().lstrip(".")
        if not name or name == "*" or name in {"localhost", "testserver"} or _is_ip(name.strip("[]")):
            continue  # a wildcard, or an address: private ones are the private-address rule's
        own.append((name, None))
    return own


def _is_ip(text: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in text else socket.AF_INET, text)
    except OSError:
        return False
    return True


def resolve(host: str, port: int, *, shown: str = "") -> list[str]:
    """Every address `host` resolves to, each checked (SendError names the first refused, and
    the host as `shown`: "127.0.0.1 (the mail server, smtp=)")."""
    shown = shown or host
    if policy.is_self(host, port, own_addresses()):
        raise SendError(policy.SELF_ADDRESS_MESSAGE.format(host=shown), refused=True)
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise SendError(HOST_NOT_FOUND_MESSAGE.format(host=shown)) from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        problem = policy.address_problem(
            shown, address, allow_private=settings.AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES
        )
        if problem:
            raise SendError(problem, refused=True)
    return addresses


def webhook_url_check(url: str) -> tuple[str, int, list[str]]:
    """The host, port and checked addresses of a webhook URL; SendError says what is wrong."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise SendError(URL_UNREADABLE_MESSAGE.format(problem=exc)) from exc
    if parts.scheme not in {"http", "https"}:
        raise SendError(URL_SCHEME_MESSAGE)
    if not parts.hostname:
        raise SendError(URL_HOST_MESSAGE)
    port = port or (443 if parts.scheme == "https" else 80)
    return parts.hostname, port, resolve(parts.hostname, port)


def email_check(address: str) -> str:
    try:
        validate_email(address)
    except ValidationError as exc:
        raise SendError(EMAIL_INVALID_MESSAGE) from exc
    return address


def apprise_prepared(url: str, *, sending: bool) -> tuple[Any, list[pinning.Checked]]:
    """The library's sender for `url`, time-limited and never following a redirect whatever
    the URL's own options say, and the checked addresses of every host it connects to (P6).

    Only an accepted service (apprise_hosts), judged by its scheme before the library makes
    anything of the URL. The hosts the URL names (its host, a mail server's smtp=) are checked
    at save and at send; a service's fixed public address when sending (its name is the
    library's, not the URL's)."""
    parsed = url_to_dict(url, secure_logging=True)
    service = N_MGR[parsed["schema"]] if parsed and parsed.get("schema") in N_MGR else None
    if parsed is None or service is None:
        raise SendError(APPRISE_UNKNOWN_MESSAGE)
    if service.__name__ in APPRISE_LOCAL_ONLY:
        raise SendError(APPRISE_LOCAL_MESSAGE, refused=True)
    try:
        apprise_hosts.check_service(str(parsed["schema"]), service)
        asset = apprise.AppriseAsset(http_redirects=False, storage_mode="memory")
        plugin = apprise.Apprise.instantiate(dict(parsed), asset=asset, suppress_exceptions=True)
        if plugin is None:
            raise SendError(APPRISE_UNKNOWN_MESSAGE)
        hosts = apprise_hosts.hosts(plugin, parsed)
    except apprise_hosts.NotAccepted as exc:
        raise SendError(exc.message, refused=True) from exc
    plugin.redirects = False
    plugin.retry = 0  # ours are the retries (with back-off, each logged), not the library's
    plugin.socket_connect_timeout = min(float(plugin.socket_connect_timeout), _timeout())
    plugin.socket_read_timeout = min(float(plugin.socket_read_timeout), _timeout())
    checked = [
        pinning.Checked(host.name, host.port, tuple(resolve(host.name, host.port, shown=host.shown)))
        for host in hosts
        if sending or not host.fixed
    ]
    return plugin, checked


def apprise_plugin(url: str) -> Any:
    """The library's sender for `url`, checked as a channel is when saved (apprise_prepared)."""
    plugin, _checked = apprise_prepared(url, sending=False)
    return plugin


SHOWN_SEGMENT_MAX = 6


def _masked_path(path: str) -> str:
    """Each path segment longer than a short word as its first and last character (an ntfy
    topic, a token in a webhook's path: whoever knows it can read or post)."""
    return "/".join(
        f"{segment[0]}...{segment[-1]}" if len(segment) > SHOWN_SEGMENT_MAX else segment
        for segment in path.split("/")
    )


def apprise_shown(url: str) -> str:
    """The URL as pages show it: the library's masked form (tokens and passwords hidden), its
    long path segments masked too, no options."""
    plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    if plugin is None:
        return ""
    parts = urlsplit(plugin.url(privacy=True).split("?", 1)[0])
    return f"{parts.scheme}://{parts.netloc}{_masked_path(parts.path)}"


def webhook_shown(url: str) -> str:
    """A webhook URL as pages show it: no credentials, long path segments masked, no query
    values (they may hold tokens)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    shown = f"{parts.scheme}://{netloc}{_masked_path(parts.path)}"
    return shown + ("?…" if parts.query else "")


# --- Sending --------------------------------------------------------------------------------------


def send_email(address: str, message: Outgoing) -> str:
    email_check(address)
    connection = get_connection(timeout=_timeout())
    email = EmailMultiAlternatives(
        subject=message.title,
        body=message.text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[address],
        connection=connection,
    )
    if message.html:
        email.attach_alternative(message.html, "text/html")
    try:
        sent = email.send()
    except (OSError, TimeoutError) as exc:
        raise SendError(CONNECT_MESSAGE.format(host="the mail server", problem=_words(exc))) from exc
    except Exception as exc:  # smtplib's refusals (SMTPRecipientsRefused, ...) name the reason
        raise SendError(APPRISE_FAILED_MESSAGE.format(problem=_words(exc))) from exc
    if sent != 1:
        raise SendError(APPRISE_FAILED_MESSAGE.format(problem="the mail server took nothing"))
    return "accepted by the mail server"


def with_open_link(url: str, link: str) -> str:
    """An ntfy URL whose notification opens `link` when tapped and has an Open button for it
    (the URL's own click and actions replaced); any other URL as it is."""
    parts = urlsplit(url)
    if parts.scheme not in {"ntfy", "ntfys"} or not link:
        return url
    query = [
        (k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in {"click", "actions"}
    ]
    query += [("click", link), ("actions", f"view, Open, {link}")]
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def send_apprise(url: str, message: Outgoing) -> str:
    """Send with the library, every host checked again and connected to only at the addresses
    just checked (P6: no second lookup; a host not checked is not connected to, and says so)."""
    plugin, checked = apprise_prepared(with_open_link(url, message.url), sending=True)
    with pinning.only_to(checked) as pin, apprise.LogCapture(level=logging.WARNING) as captured:
        ok = plugin.notify(body=message.text, title=message.title, body_format=apprise.NotifyFormat.TEXT)
    if pin.refused:
        raise SendError(APPRISE_UNCHECKED_MESSAGE.format(host=pin.refused[0]), refused=True)
    if not ok:
        lines = [line.strip() for line in captured.getvalue().splitlines() if line.strip()]
        problem = _scrub(lines[-1] if lines else "no reason given", url)
        raise SendError(APPRISE_FAILED_MESSAGE.format(problem=problem))
    return "accepted"


def webhook_headers(secret: str, message_id: str, body: str, timestamp: float) -> dict[str, str]:
    """Standard Webhooks' three headers: the id, the time (whole seconds) and the signature."""
    import datetime as dt

    moment = dt.datetime.fromtimestamp(int(timestamp), tz=dt.UTC)
    signature = Webhook(secret).sign(msg_id=message_id, timestamp=moment, data=body)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(timestamp)),
        "webhook-signature": signature,
    }


def send_webhook(url: str, secret: str, message: Outgoing) -> str:
    """POST the signed JSON body to one checked address of `url` (the one connected to is the
    one checked: a name that resolves elsewhere a moment later is not followed)."""
    host, port, addresses = webhook_url_check(url)
    parts = urlsplit(url)
    body = json.dumps(message.webhook_body, separators=(",", ":"), ensure_ascii=False)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "AIMON-Admin-Webhooks/1",
        **webhook_headers(secret, message.message_id, body, time.time()),
    }
    default_port = 443 if parts.scheme == "https" else 80
    headers["Host"] = host if port == default_port else f"{host}:{port}"
    timeout = urllib3.Timeout(connect=_timeout(), read=_timeout(), total=_timeout())
    address = addresses[0]
    if parts.scheme == "https":
        pool: urllib3.HTTPConnectionPool = urllib3.HTTPSConnectionPool(
            address, port, timeout=timeout, retries=False, cert_reqs="CERT_REQUIRED",
            server_hostname=host, assert_hostname=host,
        )  # fmt: skip
    else:
        pool = urllib3.HTTPConnectionPool(address, port, timeout=timeout, retries=False)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    try:
        response = pool.urlopen(
            "POST", path, body=body.encode(), headers=headers, redirect=False, preload_content=False
        )
        excerpt = response.read(RESPONSE_EXCERPT_BYTES, decode_content=False)
        response.release_conn()
    except urllib3.exceptions.NewConnectionError as exc:  # a ConnectTimeoutError too, in urllib3 2
        raise SendError(CONNECT_MESSAGE.format(host=host, problem=_words(exc))) from exc
    except urllib3.exceptions.ConnectTimeoutError as exc:
        problem = f"no answer within {_seconds()} seconds"
        raise SendError(CONNECT_MESSAGE.format(host=host, problem=problem)) from exc
    except (urllib3.exceptions.TimeoutError, TimeoutError) as exc:
        raise SendError(TIMEOUT_MESSAGE.format(seconds=_seconds())) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise SendError(CONNECT_MESSAGE.format(host=host, problem=_words(exc))) from exc
    finally:
        pool.close()
    status = response.status
    if 300 <= status < 400:
        location = response.headers.get("Location", "elsewhere")
        raise SendError(REDIRECT_MESSAGE.format(status=status, location=_shorten_location(location)))
    if not 200 <= status < 300:
        text = excerpt.decode("utf-8", "replace").strip()
        raise SendError(
            STATUS_MESSAGE.format(status=status, excerpt=f": {policy.shorten(text, 120)}" if text else "")
        )
    return f"answered {status}"


def _seconds() -> str:
    return f"{_timeout():g}"


def _shorten_location(location: str) -> str:
    try:
        return webhook_shown(location) or policy.shorten(location, 100)
    except ValueError:
        return policy.shorten(location, 100)


def _words(exc: BaseException) -> str:
    """An exception as a short phrase (the innermost reason urllib3 and smtplib wrap)."""
    reason = getattr(exc, "reason", None)
    text = str(reason or exc) or type(exc).__name__
    if "timed out" in text.lower():
        return f"no answer within {_seconds()} seconds"
    if "refused" in text.lower():
        return "connection refused"
    return policy.shorten(re.sub(r"<[^>]+>:?\s*", "", text), 200)


def _scrub(text: str, url: str) -> str:
    """A library message without the URL's secrets (tokens often sit in its path or query)."""
    for part in re.split(r"[/:@?&=#]+", url):
        if len(part) >= 8:
            text = text.replace(part, "…")
    return policy.shorten(text, 300)


def render_email_html(context: dict[str, object]) -> str:
    return render_to_string("email/approval.html", context)
