"""P6: every address a channel makes this server connect to passes the address guard, when the
channel is saved and again at every send, and the connection goes to the address checked.

With private addresses forbidden (production's default) each form below is refused at save,
naming what is wrong, and a channel saved with it before (a row written directly) is refused
at send: a real listener on 127.0.0.1 and ::1, at the port every form names, gets no
connection, and no connection to that port is even tried anywhere. The DNS is the only part
of the outside world the tests play (tests/notifications/outside.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import services
from aimon_admin.notifications.choices import AttemptOutcome, ChannelKind, DeliveryStatus, NotificationEvent
from aimon_admin.notifications.models import Channel, Delivery, DeliveryAttempt
from aimon_admin.notifications.services import errors
from tests.core.prg_support import assert_invalid_post_redirects_and_reloads
from tests.notifications.outside import Attempts, Listener, listener, recorded_connections
from tests.notifications.outside import fake_dns as make_dns
from tests.notifications.receivers import http_receiver, smtp_server
from tests.ports import free_port

pytestmark = pytest.mark.django_db

OPS = Actor.system("pytest")
APPRISE, WEBHOOK = ChannelKind.APPRISE, ChannelKind.WEBHOOK
PRIVATE = "is a private, loopback or link-local address"
NEVER = "is a link-local address"
MAIL = "to=x@example.com&from=a@example.com"
TEREDO = "2001:0:4136:e378:8000:0:80ff:fffe"  # server 65.54.227.120, client 127.0.0.1

# The DNS's answers for the names the forms use (the outside world).
NAMES = {
    "inside_example": "127.0.0.1",
    "sixtofour_example": "2002:7f00:1::",
    "metadata_example": "169.254.169.254",
    "mapped_example": "::ffff:10.0.0.1",
    "example_com": "93.184.216.34",  # a mail domain, public
}

# P6: (id, kind, target with the listener's {port}, what the refusal says).
REFUSED = [
    ("loopback", APPRISE, "json://127.0.0.1:{port}/", f"127.0.0.1 {PRIVATE} (127.0.0.1)"),
    ("loopback-short", WEBHOOK, "http://127.1:{port}/hook", f"127.1 {PRIVATE} (127.0.0.1)"),
    ("loopback-hex", WEBHOOK, "http://0x7f.1:{port}/hook", f"0x7f.1 {PRIVATE} (127.0.0.1)"),
    ("loopback-decimal", APPRISE, "json://2130706433:{port}/", f"2130706433 {PRIVATE} (127.0.0.1)"),
    ("loopback-octal", APPRISE, "xml://017700000001:{port}/", f"017700000001 {PRIVATE} (127.0.0.1)"),
    ("loopback-ipv6", APPRISE, "json://[::1]:{port}/", f"{PRIVATE} (::1)"),
    ("localhost", APPRISE, "form://localhost:{port}/", f"localhost {PRIVATE}"),
    ("private-10", APPRISE, "json://10.1.2.3:{port}/", f"10.1.2.3 {PRIVATE} (10.1.2.3)"),
    ("private-172", APPRISE, "xml://172.16.5.4:{port}/", f"172.16.5.4 {PRIVATE} (172.16.5.4)"),
    ("private-192", APPRISE, "form://192.168.1.10:{port}/", f"192.168.1.10 {PRIVATE} (192.168.1.10)"),
    ("metadata", APPRISE, "json://169.254.169.254:{port}/latest", f"{NEVER} (169.254.169.254)"),
    ("link-local-ipv6", APPRISE, "json://[fe80::1]:{port}/", f"{NEVER} (fe80::1)"),
    ("shared-cgnat", APPRISE, "ntfy://100.64.0.1:{port}/topic", f"100.64.0.1 {PRIVATE} (100.64.0.1)"),
    ("unique-local", APPRISE, "gotify://[fd00::1]:{port}/abcdefghijklmn", f"{PRIVATE} (fd00::1)"),
    ("site-local", APPRISE, "json://[fec0::1]:{port}/", f"{PRIVATE} (fec0::1)"),
    ("ipv4-mapped", WEBHOOK, "http://[::ffff:127.0.0.1]:{port}/hook", f"{PRIVATE} (::ffff:127.0.0.1"),
    ("ipv4-compatible", APPRISE, "json://[::7f00:1]:{port}/", f"{PRIVATE} (::127.0.0.1"),
    ("6to4", APPRISE, "json://[2002:7f00:1::]:{port}/", f"{PRIVATE} (2002:7f00:1::, which carries 127.0.0.1"),
    ("teredo", APPRISE, f"json://[{TEREDO}]:{{port}}/", f"{PRIVATE} ({TEREDO}"),
    ("nat64", APPRISE, "json://[64:ff9b::7f00:1]:{port}/", f"{PRIVATE} (64:ff9b::7f00:1"),
    ("nat64-local", APPRISE, "json://[64:ff9b:1::7f00:1]:{port}/", f"{PRIVATE} (64:ff9b:1::7f00:1"),
    ("name-inside", APPRISE, "ntfys://inside.example:{port}/topic", f"inside.example {PRIVATE} (127.0.0.1)"),
    ("name-6to4", APPRISE, "mmost://sixtofour.example:{port}/abcdefghijklmnop", "which carries 127.0.0.1)"),
    ("name-metadata", WEBHOOK, "https://metadata.example:{port}/hook", f"metadata.example {NEVER}"),
    ("name-mapped", APPRISE, "json://mapped.example:{port}/", f"{PRIVATE} (::ffff:10.0.0.1"),
    ("matrix", APPRISE, "matrix://user:pass@127.0.0.1:{port}/#room", f"127.0.0.1 {PRIVATE} (127.0.0.1)"),
    ("smtp", APPRISE, "mailto://u:p@8.8.8.8?smtp=127.0.0.1&port={port}&" + MAIL, "smtp="),
    ("smtps", APPRISE, "mailtos://u:p@8.8.8.8?smtp=127.0.0.1&port={port}&" + MAIL, "smtp="),
    ("smtp-name", APPRISE, "mailto://example.com?smtp=inside.example&port={port}&" + MAIL, "smtp="),
    ("smtp-decimal", APPRISE, "mailto://example.com?smtp=2130706433&port={port}&" + MAIL, "smtp="),
    ("smtp-6to4", APPRISE, "mailtos://u:p@8.8.8.8?smtp=[2002:7f00:1::]&port={port}&" + MAIL, "which carries"),
]

# P6: never, even where private addresses are allowed: an address that carries a link-local
# one (cloud metadata) inside it.
NEVER_EVEN_ALLOWED = [
    ("mapped", WEBHOOK, "http://[::ffff:169.254.169.254]:{port}/hook"),
    ("compatible", APPRISE, "json://[::a9fe:a9fe]:{port}/"),
    ("6to4", APPRISE, "json://[2002:a9fe:a9fe::]:{port}/"),
    ("teredo-client", APPRISE, "json://[2001:0:4136:e378:8000:0:5601:5601]:{port}/"),
    ("nat64", APPRISE, "json://[64:ff9b::a9fe:a9fe]:{port}/"),
    ("nat64-local", APPRISE, "json://[64:ff9b:1::a9fe:a9fe]:{port}/"),
    ("smtp", APPRISE, "mailto://example.com?smtp=169.254.169.254&port={port}&" + MAIL),
    ("smtp-name", APPRISE, "mailto://example.com?smtp=metadata.example&port={port}&" + MAIL),
]

# P6: services whose every connection the product cannot check are refused whatever the
# address; these would connect to the listener (or, for rsyslog, send it datagrams).
NOT_ACCEPTED = [
    ("kodi", "kodi://127.0.0.1:{port}"),
    ("apprise-api", "apprise://127.0.0.1:{port}/token"),
    ("workflow", "workflow://127.0.0.1:{port}/abc/def"),
    ("rsyslog", "rsyslog://127.0.0.1:{port}"),
]

# P6: options of accepted services that would read a file on this server or fetch one from a
# host nobody checked.
SLACK = "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/"
TELEGRAM = "tgram://123456789:abcdefgABCDEFG123456789abcdefg123/12345"
OPTIONS_REFUSED = [
    ("discord-template-file", "discord://1234/abcd?template=/etc/hostname", "template="),
    ("slack-template-url", SLACK + "?template=http://127.0.0.1:{port}/t.json", "template="),
    ("telegram-template-url", TELEGRAM + "?template=http://127.0.0.1:{port}/t.json", "template="),
    ("mail-key-file", "mailto://example.com?smtp=inside.example&pgppub=/etc/hostname&" + MAIL, "pgppub="),
    ("mail-key-lookup", "mailto://example.com?smtp=inside.example&wkd=yes&" + MAIL, "wkd="),
    ("mail-signed", "mailto://example.com?smtp=inside.example&pgp=sign&" + MAIL, "pgp="),
]


def rows(table: list[tuple[Any, ...]]) -> list[Any]:
    return [pytest.param(*row[1:], id=row[0]) for row in table]


@pytest.fixture
def forbidden(settings: Any) -> None:
    settings.AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES = False  # production's default


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with make_dns(monkeypatch, **NAMES) as answers:
        yield answers


@pytest.fixture
def port_listener() -> Iterator[Listener]:
    with listener() as listening:
        yield listening


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Attempts]:
    with recorded_connections(monkeypatch) as made:
        yield made


def save(kind: str, target: str, owner: User) -> Channel:
    if kind == WEBHOOK:
        channel, _ = services.webhook_create(name="hook", url=target, actor=OPS)
        return channel
    return services.channel_add(owner=owner, kind=kind, name="chat", target=target, actor=OPS)


def saved_before(kind: str, target: str, owner: User) -> Channel:
    """A channel saved before this rule, or while private addresses were allowed: its row as
    the service writes it, unchecked."""
    if kind == WEBHOOK:
        return Channel.objects.create(
            kind=kind, name="hook", target=target, shown_target="-", secret=services.new_webhook_secret(),
            events=["REQUESTED"],
        )  # fmt: skip
    return Channel.objects.create(owner=owner, kind=kind, name="chat", target=target, shown_target="-")


def send_a_test(channel: Channel, capture: Callable[..., Any]) -> list[tuple[str, str]]:
    """Send a test to `channel` as the page's button does; the attempts it made."""
    with capture(execute=True):
        services.channel_test(channel=channel, actor=OPS)
    return list(
        DeliveryAttempt.objects.filter(delivery__channel=channel)
        .order_by("id")
        .values_list("outcome", "detail")
    )


# --- Refused at save ------------------------------------------------------------------------------


@pytest.mark.usefixtures("forbidden", "dns")
@pytest.mark.parametrize(("kind", "target", "says"), rows(REFUSED))
def test_a_private_address_in_any_form_is_refused_at_save(
    approver: User, port_listener: Listener, kind: str, target: str, says: str
) -> None:
    # P6: the host, and any host an option names, each judged with what it carries inside.
    with pytest.raises(errors.ChannelError) as refused:
        save(kind, target.format(port=port_listener.port), approver)
    assert refused.value.field == "url"
    assert says in refused.value.message
    assert not Channel.objects.exists()
    assert port_listener.connections() == 0


@pytest.mark.usefixtures("dns")
@pytest.mark.parametrize(("kind", "target"), rows(NEVER_EVEN_ALLOWED))
def test_an_address_carrying_a_link_local_one_is_refused_even_where_private_ones_are_allowed(
    approver: User, kind: str, target: str
) -> None:
    # P6: the address inside is judged as the address itself would be.
    with pytest.raises(errors.ChannelError) as refused:
        save(kind, target.format(port=free_port()), approver)
    assert NEVER in refused.value.message
    assert "169.254.169.254" in refused.value.message
    assert not Channel.objects.exists()


@pytest.mark.parametrize("target", rows(NOT_ACCEPTED))
def test_a_service_whose_connections_cannot_be_checked_is_refused_at_save(
    approver: User, target: str
) -> None:
    # P6: only the services whose every connection is checked; the message names the scheme
    # and the accepted ones.
    scheme = target.split("://", 1)[0]
    with pytest.raises(errors.ChannelError) as refused:
        save(APPRISE, target.format(port=free_port()), approver)
    assert refused.value.field == "url"
    assert f"{scheme}://" in refused.value.message
    assert "json://, jsons://" in refused.value.message
    assert not Channel.objects.exists()


@pytest.mark.usefixtures("dns")
@pytest.mark.parametrize(("target", "says"), rows(OPTIONS_REFUSED))
def test_an_option_that_reads_or_fetches_a_file_is_refused_at_save(
    approver: User, target: str, says: str
) -> None:
    # P6: accepted services, with private addresses allowed, still not with these options.
    with pytest.raises(errors.ChannelError) as refused:
        save(APPRISE, target.format(port=free_port()), approver)
    assert refused.value.field == "url"
    assert says in refused.value.message
    assert not Channel.objects.exists()


@pytest.mark.usefixtures("forbidden")
def test_the_page_says_which_option_names_a_private_address(approver: User) -> None:
    # P6: through the form, the reason beside the field, naming the option.
    client = Client()
    client.force_login(approver)
    target = f"mailto://u:p@8.8.8.8?smtp=127.0.0.1&port={free_port()}&{MAIL}"
    assert_invalid_post_redirects_and_reloads(
        client,
        "/notifications/channels/new/",
        {"kind": "APPRISE", "name": "mail", "target": target},
        page="/notifications/",
        shows=[f"127.0.0.1 (the mail server, smtp=) {PRIVATE} (127.0.0.1)"],
    )
    assert not Channel.objects.exists()


# --- Refused at send ------------------------------------------------------------------------------


@pytest.mark.usefixtures("forbidden", "dns")
@pytest.mark.parametrize(("kind", "target", "says"), rows(REFUSED))
def test_a_private_address_in_any_form_is_refused_at_send_and_never_connected_to(
    approver: User,
    port_listener: Listener,
    attempts: Attempts,
    django_capture_on_commit_callbacks: Any,
    kind: str,
    target: str,
    says: str,
) -> None:
    # P6: checked again at every send; the delivery never connects.
    channel = saved_before(kind, target.format(port=port_listener.port), approver)
    tried = send_a_test(channel, django_capture_on_commit_callbacks)
    assert port_listener.connections() == 0
    assert attempts.to_port(port_listener.port) == []
    ((outcome, detail),) = tried
    assert outcome == AttemptOutcome.REFUSED
    assert says in detail


@pytest.mark.usefixtures("dns")
@pytest.mark.parametrize(("kind", "target"), rows(NEVER_EVEN_ALLOWED))
def test_an_address_carrying_a_link_local_one_is_refused_at_send(
    approver: User, port_listener: Listener, attempts: Attempts, django_capture_on_commit_callbacks: Any,
    kind: str, target: str,
) -> None:  # fmt: skip
    # P6: allowed private addresses do not let a link-local one through inside another.
    channel = saved_before(kind, target.format(port=port_listener.port), approver)
    ((outcome, detail),) = send_a_test(channel, django_capture_on_commit_callbacks)
    assert (outcome, NEVER in detail) == (AttemptOutcome.REFUSED, True)
    assert attempts.to_port(port_listener.port) == []


@pytest.mark.parametrize("target", rows(NOT_ACCEPTED))
def test_a_service_whose_connections_cannot_be_checked_is_refused_at_send(
    approver: User, port_listener: Listener, attempts: Attempts, django_capture_on_commit_callbacks: Any,
    target: str,
) -> None:  # fmt: skip
    # P6: a row saved before the rule is not sent to either.
    channel = saved_before(APPRISE, target.format(port=port_listener.port), approver)
    ((outcome, detail),) = send_a_test(channel, django_capture_on_commit_callbacks)
    assert outcome == AttemptOutcome.REFUSED
    assert f"{target.split('://', 1)[0]}://" in detail
    assert port_listener.connections() == 0
    assert attempts.to_port(port_listener.port) == []


@pytest.mark.usefixtures("dns")
@pytest.mark.parametrize(("target", "says"), rows(OPTIONS_REFUSED))
def test_an_option_that_reads_or_fetches_a_file_is_refused_at_send(
    approver: User, port_listener: Listener, attempts: Attempts, django_capture_on_commit_callbacks: Any,
    target: str, says: str,
) -> None:  # fmt: skip
    # P6: the template is neither read nor fetched (the listener would serve it).
    channel = saved_before(APPRISE, target.format(port=port_listener.port), approver)
    ((outcome, detail),) = send_a_test(channel, django_capture_on_commit_callbacks)
    assert (outcome, says in detail) == (AttemptOutcome.REFUSED, True)
    assert port_listener.connections() == 0
    assert attempts.to_port(port_listener.port) == []


# --- The connection goes to the address checked -------------------------------------------------------


@pytest.mark.usefixtures("forbidden")
def test_a_name_that_resolves_elsewhere_after_the_check_is_not_followed(
    approver: User,
    port_listener: Listener,
    attempts: Attempts,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # P6, DNS rebinding: public when checked, 127.0.0.1 a moment later. The send connects to
    # the address it checked (unreachable here) and looks the name up once, for its check.
    with make_dns(monkeypatch, rebind_example="93.184.216.34") as dns:
        channel = save(APPRISE, f"json://rebind.example:{port_listener.port}/chat", approver)
        dns.answers["rebind.example"] = ["93.184.216.34", "127.0.0.1"]
        ((outcome, _detail),) = send_a_test(channel, django_capture_on_commit_callbacks)
    assert outcome == AttemptOutcome.FAILED
    assert port_listener.connections() == 0
    assert attempts.to_port(port_listener.port) == [("93.184.216.34", port_listener.port)]
    assert dns.asked["rebind.example"] == 2  # at save, and at send's check: never again


def test_the_message_reaches_the_address_checked_not_the_one_the_name_moves_to(
    approver: User,
    port_listener: Listener,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # P6 with private addresses allowed: the name is 127.0.0.2 when checked, then 127.0.0.1;
    # the receiver on 127.0.0.2 gets the message through the pinned path, 127.0.0.1 nothing.
    with http_receiver(host="127.0.0.2", port=port_listener.port) as receiver:
        with make_dns(monkeypatch, chat_example="127.0.0.2") as dns:
            channel = save(APPRISE, f"json://chat.example:{port_listener.port}/chat", approver)
            dns.answers["chat.example"] = ["127.0.0.2", "127.0.0.1"]
            ((outcome, _detail),) = send_a_test(channel, django_capture_on_commit_callbacks)
        assert outcome == AttemptOutcome.SENT
        (got,) = receiver.got
    assert got.path == "/chat"
    assert got.headers["host"].startswith("chat.example")
    assert port_listener.connections() == 0
    assert dns.asked["chat.example"] == 2


def test_mail_goes_to_the_checked_mail_server(
    approver: User, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    # P6: an allowed mail server (smtp=) named by a name, reached at the address checked.
    with smtp_server() as server, make_dns(monkeypatch, mail_example="127.0.0.1", **NAMES) as dns:
        target = f"mailto://example.com?smtp=mail.example&port={server.port}&from=aimon@example.com&to=alice@example.com"
        channel = save(APPRISE, target, approver)
        ((outcome, detail),) = send_a_test(channel, django_capture_on_commit_callbacks)
        assert (outcome, detail) == (AttemptOutcome.SENT, "accepted")
        assert server.mailbox.arrived.wait(5)
    (message,) = server.mailbox.messages
    assert message["To"] == "alice@example.com"
    assert dns.asked["mail.example"] == 2


def test_a_proxy_in_the_environment_is_not_used(
    approver: User,
    port_listener: Listener,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # P6: a proxy would connect where this server cannot check; the channel connects directly.
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{port_listener.port}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    with http_receiver() as receiver:
        channel = save(APPRISE, f"json://{receiver.base}/chat", approver)
        ((outcome, _detail),) = send_a_test(channel, django_capture_on_commit_callbacks)
        assert outcome == AttemptOutcome.SENT
        assert len(receiver.got) == 1
    assert port_listener.connections() == 0


def test_a_refused_send_is_final(
    approver: User, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # P6: a refusal is not retried (REFUSED, the delivery FAILED at once).
    settings.AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES = False
    target = f"mailto://u:p@8.8.8.8?smtp=127.0.0.1&port={free_port()}&{MAIL}"
    channel = saved_before(APPRISE, target, approver)
    send_a_test(channel, django_capture_on_commit_callbacks)
    (delivery,) = Delivery.objects.filter(channel=channel, event=NotificationEvent.TEST)
    assert delivery.status == DeliveryStatus.FAILED
    assert delivery.attempts == 1
    assert delivery.next_attempt_at <= timezone.now()
