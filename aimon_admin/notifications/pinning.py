"""Connections only to the addresses checked (P6): while a chat, phone or mail message is sent,
every name the sending library looks up is answered from the addresses checked for it a moment
before, with no second lookup (a name that resolves elsewhere since, DNS rebinding, is not
followed), and a name or address nobody checked is not looked up at all: the send fails,
closed, and says so.

The notification library (Apprise) connects through `requests` and `smtplib`; both find the
address to connect to with `socket.getaddrinfo`, an IP address included. That function is
wrapped once, process-wide; the wrapper answers from a pin only in the thread that holds one
(a Celery worker's or a web request's, each its own), and passes every other lookup on
unchanged. While pinned, `requests` takes no proxy from the environment (HTTP_PROXY,
HTTPS_PROXY, ALL_PROXY): a proxy would connect where this server cannot check. (Were one
used anyway, its address, not checked, would be refused like any other.)
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import requests

UNCHECKED_LOOKUP = "{host} was not checked for this channel; this server does not connect there."


@dataclass(frozen=True)
class Checked:
    """A host, the port connected to, and the addresses it resolved to when checked."""

    host: str
    port: int
    addresses: tuple[str, ...]


def host_key(host: str | bytes) -> str:
    """A host as a lookup names it, in one spelling: no brackets, no trailing dot, lower case,
    an international name in its ASCII (IDNA) form."""
    text = host.decode("ascii", "replace") if isinstance(host, bytes) else str(host)
    text = text.strip().strip("[]").rstrip(".").lower()
    try:
        return text.encode("idna").decode("ascii")
    except UnicodeError:
        return text


@dataclass
class Pin:
    """The checked addresses of one send, and the lookups it refused."""

    addresses: dict[tuple[str, int], tuple[str, ...]]
    refused: list[str] = field(default_factory=list)

    def answer(self, host: Any, port: Any, family: int, kind: int, proto: int) -> list[tuple[Any, ...]]:
        """getaddrinfo's answer for a checked host and port, its checked addresses only (of
        the family asked for); any other raises, as a name that does not exist would."""
        try:
            number = int(port)
        except (TypeError, ValueError):
            number = -1
        addresses = self.addresses.get((host_key(host), number), ())
        kind = kind or socket.SOCK_STREAM
        proto = proto or (socket.IPPROTO_TCP if kind == socket.SOCK_STREAM else 0)
        infos: list[tuple[Any, ...]] = []
        for address in addresses:
            if ":" in address:
                if family in (socket.AF_UNSPEC, socket.AF_INET6):
                    infos.append((socket.AF_INET6, kind, proto, "", (address, number, 0, 0)))
            elif family in (socket.AF_UNSPEC, socket.AF_INET):
                infos.append((socket.AF_INET, kind, proto, "", (address, number)))
        if not infos:
            shown = host.decode("ascii", "replace") if isinstance(host, bytes) else str(host)
            shown = f"[{shown}]" if ":" in shown else shown
            self.refused.append(f"{shown}:{number}" if number >= 0 else shown)
            raise socket.gaierror(socket.EAI_NONAME, UNCHECKED_LOOKUP.format(host=shown))
        return infos


_local = threading.local()
_install_lock = threading.Lock()


def current() -> Pin | None:
    """This thread's pin, while it sends a message."""
    return getattr(_local, "pin", None)


def _pinned_getaddrinfo(previous: Callable[..., Any]) -> Callable[..., Any]:
    def getaddrinfo(
        host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[tuple[Any, ...]]:
        pin = current()
        if pin is None:
            return previous(host, port, family, type, proto, flags)
        return pin.answer(host, port, family, type, proto)

    getaddrinfo.aimon_pinned = True  # type: ignore[attr-defined]
    return getaddrinfo


def _without_proxies(previous: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    def merge_environment_settings(self: requests.Session, *args: Any, **kwargs: Any) -> dict[str, Any]:
        merged = previous(self, *args, **kwargs)
        if current() is not None:
            merged["proxies"] = {}  # straight to the checked address; the CA bundle is kept
        return merged

    merge_environment_settings.aimon_pinned = True  # type: ignore[attr-defined]
    return merge_environment_settings


def _install() -> None:
    """Wrap getaddrinfo and requests' sessions, once (again if something replaced them since,
    as a test's stand-in DNS does: the wrapper then passes unpinned lookups on to it)."""
    with _install_lock:
        if not getattr(socket.getaddrinfo, "aimon_pinned", False):
            socket.getaddrinfo = _pinned_getaddrinfo(socket.getaddrinfo)
        merge = requests.Session.merge_environment_settings
        if not getattr(merge, "aimon_pinned", False):
            requests.Session.merge_environment_settings = _without_proxies(merge)  # type: ignore[method-assign]


@contextlib.contextmanager
def only_to(checked: Iterable[Checked]) -> Iterator[Pin]:
    """Within this block, this thread connects only to the `checked` addresses, each host at
    its checked port; the pin lists any lookup it refused."""
    _install()
    addresses: dict[tuple[str, int], tuple[str, ...]] = {}
    for item in checked:
        key = (host_key(item.host), item.port)
        addresses[key] = tuple(dict.fromkeys(addresses.get(key, ()) + item.addresses))
    pin = Pin(addresses)
    outer = current()
    _local.pin = pin
    try:
        yield pin
    finally:
        _local.pin = outer
