"""The world outside the product, for the address-guard tests (P6): a listener on this machine
that only counts who connects to it, a DNS that answers the names a test gives it as told, and
a record of every connection attempt, where an address off this machine is unreachable (the
tests never reach the internet). The product's own code is not replaced: it looks names up and
connects over real sockets, and these stand in for what it would reach."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import select
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.ports import free_port


@dataclass
class Listener:
    """Real listening sockets on 127.0.0.1 and ::1, one port: a connection shows as accepted."""

    port: int
    sockets: list[socket.socket] = field(default_factory=list)
    accepted: int = 0

    def connections(self) -> int:
        """How many connections have arrived so far (each accepted and closed at once)."""
        while True:
            readable, _, _ = select.select(self.sockets, [], [], 0)
            if not readable:
                return self.accepted
            for listening in readable:
                conn, _ = listening.accept()
                conn.close()
                self.accepted += 1


@contextlib.contextmanager
def listener() -> Iterator[Listener]:
    port = free_port()
    sockets = [socket.create_server(("127.0.0.1", port))]
    with contextlib.suppress(OSError):  # a machine without IPv6 loopback
        sockets.append(socket.create_server(("::1", port), family=socket.AF_INET6))
    try:
        yield Listener(port, sockets)
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class FakeDns:
    """Answers for the names a test sets (each name's answers in turn, the last one kept);
    every other name goes to the real resolver. `asked` counts the lookups of each set name."""

    real: Any
    answers: dict[str, list[str]] = field(default_factory=dict)
    asked: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def getaddrinfo(
        self, host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[tuple[Any, ...]]:
        name = host.decode() if isinstance(host, bytes) else str(host)
        with self.lock:
            queue = self.answers.get(name.lower())
            if queue is None:
                return self.real(host, port, family, type, proto, flags)
            self.asked[name.lower()] = self.asked.get(name.lower(), 0) + 1
            address = queue.pop(0) if len(queue) > 1 else queue[0]
        number = int(port) if port is not None else 0
        if ipaddress.ip_address(address).version == 6:
            return [(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, number, 0, 0))]
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, number))]


@contextlib.contextmanager
def fake_dns(monkeypatch: Any, **names: str | list[str]) -> Iterator[FakeDns]:
    """The DNS, answering `names` (dots written as underscores: inside_example="127.0.0.1")."""
    dns = FakeDns(real=socket.getaddrinfo)
    for name, answer in names.items():
        dns.answers[name.replace("_", ".")] = [answer] if isinstance(answer, str) else list(answer)
    monkeypatch.setattr(socket, "getaddrinfo", dns.getaddrinfo)
    yield dns


@dataclass
class Attempts:
    """Every address a socket tried to connect to while recorded."""

    made: list[tuple[str, int]] = field(default_factory=list)

    def to_port(self, port: int) -> list[tuple[str, int]]:
        return [address for address in self.made if address[1] == port]


def _on_this_machine(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def recorded_connections(monkeypatch: Any) -> Iterator[Attempts]:
    """Record each connection attempt; one to an address off this machine fails as an
    unreachable network would (nothing leaves the machine)."""
    attempts = Attempts()

    class Recorded(socket.socket):
        def connect(self, address: Any) -> None:
            if isinstance(address, tuple):
                attempts.made.append((str(address[0]), int(address[1])))
                if not _on_this_machine(str(address[0])):
                    raise OSError(errno.ENETUNREACH, "Network is unreachable (the test's outside world)")
            super().connect(address)

    monkeypatch.setattr(socket, "socket", Recorded)
    yield attempts
