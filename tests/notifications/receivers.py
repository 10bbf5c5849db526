"""Real receivers the notification tests start and stop: an HTTP server that records what it
is sent and answers as told (2xx, 500, a redirect, or nothing at all), and an SMTP server
(aiosmtpd). Nothing of the sender is mocked: the product sends over real sockets."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller

from tests.ports import free_port


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HttpReceiver:
    """What a local HTTP endpoint got, and how it answers the next request."""

    host: str = "127.0.0.1"
    port: int = 0
    answer: int = 200
    location: str = ""
    hang: bool = False
    got: list[Received] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    @property
    def base(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self, path: str = "/hook", scheme: str = "http") -> str:
        return f"{scheme}://{self.base}{path}"

    def wait(self, count: int = 1, timeout: float = 10.0) -> list[Received]:
        """Block until `count` requests have arrived (a test's bound, not a timed assertion)."""
        deadline = threading.Event()
        timer = threading.Timer(timeout, deadline.set)
        timer.start()
        try:
            while len(self.got) < count and not deadline.is_set():
                self.arrived.wait(0.05)
                self.arrived.clear()
        finally:
            timer.cancel()
        return list(self.got)


def _handler(receiver: HttpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            receiver.got.append(
                Received("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            receiver.arrived.set()
            if receiver.hang:
                receiver.release.wait(30)  # until the test stops the server
                return
            self.send_response(receiver.answer)
            if receiver.location:
                self.send_header("Location", receiver.location)
            payload = b'{"ok": true}' if receiver.answer < 300 else b"receiver says no"
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


@contextlib.contextmanager
def http_receiver(**behaviour: Any) -> Iterator[HttpReceiver]:
    """A receiver on 127.0.0.1 (or `host`, another loopback address) at a port the system
    picks (or `port`)."""
    receiver = HttpReceiver(**behaviour)
    server = ThreadingHTTPServer((receiver.host, receiver.port), _handler(receiver))
    server.daemon_threads = True
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


class _Mailbox:
    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.arrived = threading.Event()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        self.messages.append(message_from_bytes(envelope.content, policy=policy.default))  # type: ignore[arg-type]
        self.arrived.set()
        return "250 Message accepted for delivery"


@dataclass
class SmtpServer:
    host: str
    port: int
    mailbox: _Mailbox


@contextlib.contextmanager
def smtp_server() -> Iterator[SmtpServer]:
    """A real SMTP server (aiosmtpd) on 127.0.0.1, started and stopped by the test."""
    mailbox = _Mailbox()
    port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield SmtpServer("127.0.0.1", port, mailbox)
    finally:
        controller.stop()
