"""P6: while a message is sent, this thread connects only to the addresses checked for it
(notifications.pinning), over real sockets to a real listener on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import requests

from aimon_admin.notifications import pinning
from tests.notifications.outside import Listener, listener


@pytest.fixture
def port_listener() -> Iterator[Listener]:
    with listener() as listening:
        yield listening


def test_a_checked_name_connects_to_its_checked_address_without_a_lookup(port_listener: Listener) -> None:
    # P6: the name is answered from the pin, in any spelling of it, at its checked port.
    checked = pinning.Checked("Chat.Example", port_listener.port, ("127.0.0.1",))
    with pinning.only_to([checked]) as pin:
        for spelling in ("chat.example", "CHAT.example.", "[chat.example]"):
            with socket.create_connection((spelling, port_listener.port), timeout=2):
                pass
    assert port_listener.connections() == 3
    assert pin.refused == []


def test_an_unchecked_name_address_or_port_is_not_connected_to(port_listener: Listener) -> None:
    # P6, fail closed: an address, a name or a port nobody checked is never looked up.
    checked = pinning.Checked("chat.example", port_listener.port, ("127.0.0.2",))
    with pinning.only_to([checked]) as pin:
        for host, port in (
            ("127.0.0.1", port_listener.port),
            ("localhost", port_listener.port),
            ("chat.example", port_listener.port + 1),
        ):
            with pytest.raises(socket.gaierror, match="was not checked for this channel"):
                socket.create_connection((host, port), timeout=2)
    assert port_listener.connections() == 0
    assert pin.refused == [
        f"127.0.0.1:{port_listener.port}",
        f"localhost:{port_listener.port}",
        f"chat.example:{port_listener.port + 1}",
    ]


def test_only_the_pinned_thread_is_held_and_only_for_the_block(port_listener: Listener) -> None:
    # P6: a Celery worker's other threads, and this one afterwards, look names up as usual.
    seen: list[int] = []

    def elsewhere() -> None:
        with socket.create_connection(("127.0.0.1", port_listener.port), timeout=2):
            seen.append(1)

    with pinning.only_to([]):
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join(5)
        with pytest.raises(socket.gaierror):
            socket.create_connection(("127.0.0.1", port_listener.port), timeout=2)
    with socket.create_connection(("127.0.0.1", port_listener.port), timeout=2):
        pass
    assert seen == [1]
    assert port_listener.connections() == 2


def test_a_pin_inside_another_gives_the_outer_one_back() -> None:
    outer = pinning.Checked("outer.example", 80, ("127.0.0.1",))
    inner = pinning.Checked("inner.example", 80, ("127.0.0.1",))
    with pinning.only_to([outer]):
        with pinning.only_to([inner]):
            assert socket.getaddrinfo("inner.example", 80)
            with pytest.raises(socket.gaierror):
                socket.getaddrinfo("outer.example", 80)
        assert socket.getaddrinfo("outer.example", 80)[0][4] == ("127.0.0.1", 80)
    assert pinning.current() is None


def test_requests_takes_no_proxy_from_the_environment_while_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    # P6: HTTP_PROXY and the like are not used while a message is sent, and are as before after.
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    session = requests.Session()
    with pinning.only_to([]):
        merged = session.merge_environment_settings("http://chat.example/", {}, None, None, None)
        assert merged["proxies"] == {}
    merged = session.merge_environment_settings("http://chat.example/", {}, None, None, None)
    assert merged["proxies"] == {"http": "http://proxy.example:3128"}
