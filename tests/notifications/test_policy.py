"""notifications.policy, pure (P1, P2, P4, P6): what a message says and never says, the webhook
body, which addresses a channel may point at (and what an address carries inside it), quiet
hours and digests, back-off."""

from __future__ import annotations

import datetime as dt
import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aimon_admin.notifications import policy
from aimon_admin.notifications.choices import NotificationEvent
from tests.fuzzing import budget

EXPIRES = dt.datetime(2026, 12, 2, 1, 30, tzinfo=dt.UTC)


def facts(**overrides: object) -> policy.RequestFacts:
    values: dict[str, object] = {
        "id": "0f9c",
        "kind": "SKILL",
        "runtime": "agent-one",
        "session_id": "s-1",
        "invoking_session_id": None,
        "principal": "alice",
        "skills": ("deploy", "notify"),
        "reason": "ship the release",
        "expires_at": EXPIRES,
        "url": "http://aimon.test/approvals/requests/0f9c/",
    }
    values.update(overrides)
    return policy.RequestFacts(**values)  # type: ignore[arg-type]


def test_the_message_names_every_fact_and_one_link() -> None:
    # P1: runtime, session, principal, skills, reason, expiry, and the request's page.
    message = policy.request_message(facts(), NotificationEvent.REQUESTED)
    assert message.title == "agent-one asks for deploy, notify"
    assert message.text.splitlines() == [
        "Runtime: agent-one",
        "Session: s-1",
        "For: alice",
        "Skills: deploy, notify",
        "Reason: ship the release",
        "Expires: 2026-12-02 01:30 UTC",
        "",
        "Open: http://aimon.test/approvals/requests/0f9c/",
        policy.LINK_NOTE,
    ]


@pytest.mark.parametrize(
    ("session_id", "invoking", "principal", "session_line", "for_line"),
    [
        (None, None, "", f"Session: {policy.NO_SESSION}", f"For: {policy.NOBODY}"),
        (None, "s-parent", "bob", "Session: a fork of s-parent", "For: bob"),
    ],
)
def test_no_session_says_answers_become_agent_wide(
    session_id: str | None, invoking: str | None, principal: str, session_line: str, for_line: str
) -> None:
    # P1 + S6: a sessionless request's answers land agent-wide; the message says so.
    lines = policy.request_message(
        facts(session_id=session_id, invoking_session_id=invoking, principal=principal),
        NotificationEvent.REQUESTED,
    ).text.splitlines()
    assert session_line in lines
    assert for_line in lines


def test_a_tool_request_names_the_tool_and_its_subject_never_the_arguments() -> None:
    # P1 + U2: the tool with its subject, shortened; the page shows the rest to those allowed.
    subject = "git push origin main " + "x" * 400
    tool = facts(kind="TOOL", skills=(), tool="git_push", server="git", subject=subject)
    message = policy.request_message(tool, NotificationEvent.REQUESTED)
    assert message.title.startswith("agent-one asks to run git/git_push: git push origin main")
    (line,) = [line for line in message.text.splitlines() if line.startswith("Tool: ")]
    assert len(line) == len("Tool: git/git_push: ") + policy.SUBJECT_SHOWN_MAX
    assert line.endswith("…")
    body = policy.webhook_payload(tool, NotificationEvent.REQUESTED, EXPIRES)
    request = body["data"]["request"]  # type: ignore[index]
    assert (request["tool"], request["server"]) == ("git_push", "git")
    assert "arguments" not in request
    assert "skills" not in request


def test_the_webhook_body_is_the_documented_shape() -> None:
    # The webhook contract: type, timestamp, data.request with id, kind, runtime, session_id,
    # principal, skills or tool, subject, url.
    body = policy.webhook_payload(facts(), NotificationEvent.REQUESTED, EXPIRES)
    assert body["type"] == "approval.requested"
    assert body["timestamp"] == "2026-12-02T01:30:00Z"
    request = body["data"]["request"]  # type: ignore[index]
    assert {
        k: request[k]
        for k in ("id", "kind", "runtime", "session_id", "principal", "skills", "subject", "url")
    } == {
        "id": "0f9c",
        "kind": "SKILL",
        "runtime": "agent-one",
        "session_id": "s-1",
        "principal": "alice",
        "skills": ["deploy", "notify"],
        "subject": None,
        "url": "http://aimon.test/approvals/requests/0f9c/",
    }
    answered = policy.webhook_payload(
        facts(status="ANSWERED", answered_by="alice", decisions=(("deploy", "ALLOW"),)),
        NotificationEvent.ANSWERED,
        EXPIRES,
    )
    assert answered["type"] == "approval.answered"
    assert answered["data"]["request"]["decisions"] == [{"name": "deploy", "decision": "ALLOW"}]  # type: ignore[index]


def test_a_digest_names_each_request_with_its_link() -> None:
    # A digest: one message for several requests.
    message = policy.digest_message(
        [facts(), facts(id="aa11", url="http://aimon.test/approvals/requests/aa11/")]
    )
    assert message.title == "2 requests wait for you"
    assert message.text.count("Open: ") == 2
    assert "Open: http://aimon.test/approvals/requests/aa11/" in message.text
    assert policy.digest_message([facts()]).title == "1 request waits for you"


@pytest.mark.parametrize(
    ("address", "allow_private", "refused"),
    [
        ("93.184.216.34", False, False),
        ("2606:2800:220:1:248:1893:25c8:1946", False, False),
        ("127.0.0.1", False, True),
        ("127.0.0.1", True, False),
        ("10.1.2.3", False, True),
        ("192.168.1.10", False, True),
        ("172.16.0.1", False, True),
        ("100.64.0.1", False, True),  # shared address space (carrier-grade NAT)
        ("::1", False, True),
        ("fd00::1", False, True),
        ("::ffff:127.0.0.1", False, True),  # IPv4-mapped loopback
        ("0.0.0.0", True, True),  # noqa: S104 - never, even where private addresses are allowed
        ("169.254.169.254", True, True),  # cloud metadata: never
        ("fe80::1", True, True),
        ("224.0.0.1", True, True),
    ],
)
def test_which_addresses_a_channel_may_point_at(address: str, allow_private: bool, refused: bool) -> None:
    # Server-side request forgery (bad input).
    problem = policy.address_problem("host.example", address, allow_private=allow_private)
    assert (problem is not None) == refused
    if refused:
        assert "host.example" in problem
        assert address in problem


@pytest.mark.parametrize(
    ("address", "allow_private", "carried"),
    [
        ("2002:7f00:1::", False, "127.0.0.1"),  # 6to4
        ("2002:a9fe:a9fe::1", True, "169.254.169.254"),
        ("2001:0:4136:e378:8000:0:5601:5601", True, "169.254.169.254"),  # Teredo: the client, inverted
        ("2001:0:a9fe:a9fe:8000:0:f7f7:f7f7", True, "169.254.169.254"),  # Teredo: its server
        ("64:ff9b::7f00:1", False, "127.0.0.1"),  # NAT64, well-known prefix
        ("64:ff9b::a9fe:a9fe", True, "169.254.169.254"),
        ("64:ff9b:1::a9fe:a9fe", True, "169.254.169.254"),  # NAT64, local-use, a /96 in it
        ("64:ff9b:1:a9fe:a9:fe00::", True, "169.254.169.254"),  # ... a /48
        ("::a9fe:a9fe", True, "169.254.169.254"),  # IPv4-compatible
        ("::ffff:169.254.169.254", True, "169.254.169.254"),  # IPv4-mapped
        ("::ffff:0:a9fe:a9fe", True, "169.254.169.254"),  # IPv4-translated
    ],
)
def test_an_address_carrying_another_is_judged_by_what_it_carries(
    address: str, allow_private: bool, carried: str
) -> None:
    # P6: refused when the address inside would be, the message naming both.
    problem = policy.address_problem("host.example", address, allow_private=allow_private)
    assert problem is not None
    assert f"({address}, which carries {carried})" in problem


@pytest.mark.parametrize(
    "address",
    ["64:ff9b::5db8:d822", "::ffff:93.184.216.34", "2002:5db8:d822::1", "fec0::1", "fd12:3456::1"],
)
def test_a_translation_of_a_public_address_is_public_and_site_local_private(address: str) -> None:
    # P6: NAT64 and IPv4-mapped forms of a public address are that address; 6to4 of one is
    # global; site-local (fec0::/10) and unique-local (fc00::/7) are private.
    problem = policy.address_problem("host.example", address, allow_private=False)
    assert (problem is None) == (address.startswith(("64:", "::ffff:", "2002:")))


IPV4 = st.integers(min_value=0, max_value=2**32 - 1).map(ipaddress.IPv4Address)


def wrappings(inner: ipaddress.IPv4Address) -> list[str]:
    """Each IPv6 form that carries `inner`."""
    value = int(inner)
    inverted = value ^ 0xFFFFFFFF
    return [
        str(ipaddress.IPv6Address((0xFFFF << 32) | value)),  # mapped
        str(ipaddress.IPv6Address((0xFFFF << 32 << 16) | value)),  # translated
        str(ipaddress.IPv6Address(value)) if value > 1 else "::ffff:" + str(inner),  # compatible
        str(ipaddress.IPv6Address((0x2002 << 112) | (value << 80) | 1)),  # 6to4
        str(ipaddress.IPv6Address((0x20010000 << 96) | (0x4136E378 << 64) | inverted)),  # Teredo client
        str(ipaddress.IPv6Address((0x20010000 << 96) | (value << 64) | 0x4136E378 ^ 0xFFFFFFFF)),  # server
        str(ipaddress.IPv6Address((0x64FF9B << 96) | value)),  # NAT64
        str(ipaddress.IPv6Address((0x64FF9B0001 << 80) | value)),  # NAT64, local-use
    ]


@budget(300)
@given(IPV4, st.booleans())
def test_no_wrapping_lets_a_refused_ipv4_address_through(inner: ipaddress.IPv4Address, allow: bool) -> None:
    # P6: whatever carries a refused IPv4 address is refused too.
    if policy.address_problem("h", str(inner), allow_private=allow) is None:
        return
    for address in wrappings(inner):
        assert policy.address_problem("h", address, allow_private=allow) is not None, address


def test_the_product_itself_is_recognised_by_host_and_port() -> None:
    own = [("aimon.example.com", 443), ("admin.example.com", None)]
    assert policy.is_self("AIMON.example.com.", 443, own)
    assert not policy.is_self("aimon.example.com", 8443, own)
    assert policy.is_self("admin.example.com", 8080, own)
    assert not policy.is_self("other.example.com", 443, own)


@pytest.mark.parametrize(
    ("now", "start", "end", "zone", "until"),
    [
        # 22:00-07:00 in Paris (UTC+1 in December): 23:30 local is quiet until 07:00 local.
        ("2026-12-01T22:30", "22:00", "07:00", "Europe/Paris", "2026-12-02T06:00"),
        ("2026-12-02T05:00", "22:00", "07:00", "Europe/Paris", "2026-12-02T06:00"),
        ("2026-12-02T06:00", "22:00", "07:00", "Europe/Paris", None),
        ("2026-12-02T12:00", "09:00", "17:00", "UTC", "2026-12-02T17:00"),
        ("2026-12-02T17:00", "09:00", "17:00", "UTC", None),
        ("2026-12-02T12:00", "09:00", "09:00", "UTC", None),  # start == end: none
    ],
)
def test_quiet_hours_in_the_persons_time_zone(
    now: str, start: str, end: str, zone: str, until: str | None
) -> None:
    # Quiet hours hold a message until they end (they may wrap midnight).
    got = policy.quiet_until(
        dt.datetime.fromisoformat(now).replace(tzinfo=dt.UTC),
        start=dt.time.fromisoformat(start),
        end=dt.time.fromisoformat(end),
        timezone=zone,
    )
    assert got == (dt.datetime.fromisoformat(until).replace(tzinfo=dt.UTC) if until else None)


def test_a_message_joins_the_open_digest_or_waits_out_quiet_hours() -> None:
    now = EXPIRES
    later = now + dt.timedelta(minutes=3)
    assert policy.held_until(now, digest_minutes=0, open_digest_due=None, quiet_end=None) is None
    assert policy.held_until(
        now, digest_minutes=15, open_digest_due=None, quiet_end=None
    ) == now + dt.timedelta(minutes=15)
    assert policy.held_until(now, digest_minutes=15, open_digest_due=later, quiet_end=None) == later
    quiet_end = now + dt.timedelta(hours=5)
    assert policy.held_until(now, digest_minutes=15, open_digest_due=later, quiet_end=quiet_end) == quiet_end
    assert policy.held_until(now, digest_minutes=0, open_digest_due=None, quiet_end=quiet_end) == quiet_end


def test_back_off_doubles_up_to_ten_minutes() -> None:
    # P2: retried with back-off.
    assert [policy.backoff_seconds(n) for n in range(1, 9)] == [10, 20, 40, 80, 160, 320, 600, 600]
