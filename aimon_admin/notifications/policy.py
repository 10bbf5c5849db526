"""Pure rules of notifications (P1, P2, P4, P6): what a message says, which addresses a
channel may point at, when a held message is due, how long to wait before trying again.

No models, no querysets: tables of cases test them without a database.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from aimon_admin.core.durations import duration_words
from aimon_admin.notifications.choices import EVENT_TYPES, NotificationEvent

SUBJECT_SHOWN_MAX = 200
REASON_SHOWN_MAX = 500
NO_SESSION = "no session — answers become agent-wide"
NOBODY = "nobody here — operators and the runtime's owner answer"
LINK_NOTE = "The link opens the request after you sign in; it answers nothing."


@dataclass(frozen=True)
class RequestFacts:
    """What a message may say about a request: never its token, secret or full arguments."""

    id: str
    kind: str  # "SKILL" or "TOOL"
    runtime: str
    session_id: str | None
    invoking_session_id: str | None
    principal: str
    skills: tuple[str, ...] = ()
    tool: str = ""
    server: str = ""
    subject: str | None = None
    reason: str = ""
    expires_at: dt.datetime | None = None
    url: str = ""
    status: str = "PENDING"
    answered_by: str = ""
    decisions: tuple[tuple[str, str], ...] = field(default=())
    # P2: when nobody answered it in its runtime's time and it was sent to the operators.
    escalated_at: dt.datetime | None = None
    waited_seconds: int = 0


@dataclass(frozen=True)
class Message:
    title: str
    text: str


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split()) if "\n" in text or "\r" in text else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def what_is_asked(facts: RequestFacts) -> str:
    """The skills, or the tool with its subject (shortened: the page shows the rest)."""
    if facts.kind == "TOOL":
        name = f"{facts.server}/{facts.tool}" if facts.server else facts.tool
        if facts.subject:
            return f"{name}: {shorten(facts.subject, SUBJECT_SHOWN_MAX)}"
        return name
    return ", ".join(facts.skills)


def session_words(facts: RequestFacts) -> str:
    if facts.session_id:
        return facts.session_id
    if facts.invoking_session_id:
        return f"a fork of {facts.invoking_session_id}"
    return NO_SESSION


def expiry_words(expires_at: dt.datetime | None) -> str:
    if expires_at is None:
        return "—"
    return expires_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def request_title(facts: RequestFacts, event: str) -> str:
    asked = what_is_asked(facts)
    if event == NotificationEvent.ANSWERED:
        return shorten(f"{facts.runtime}: answered — {asked}", 250)
    if event == NotificationEvent.ESCALATED:
        return shorten(f"{facts.runtime} is still waiting: {asked}", 250)
    verb = "asks to run" if facts.kind == "TOOL" else "asks for"
    return shorten(f"{facts.runtime} {verb} {asked}", 250)


def request_lines(facts: RequestFacts) -> list[str]:
    label = "Tool" if facts.kind == "TOOL" else ("Skill" if len(facts.skills) == 1 else "Skills")
    lines = [
        f"Runtime: {facts.runtime}",
        f"Session: {session_words(facts)}",
        f"For: {facts.principal or NOBODY}",
        f"{label}: {what_is_asked(facts)}",
    ]
    if facts.reason:
        lines.append(f"Reason: {shorten(facts.reason, REASON_SHOWN_MAX)}")
    lines.append(f"Expires: {expiry_words(facts.expires_at)}")
    return lines


def escalation_words(facts: RequestFacts) -> str:
    """Why an escalation reaches its operators: "Nobody answered in 10 minutes; sent to …"."""
    if facts.escalated_at is None:
        return ""
    return (
        f"Nobody answered in {duration_words(facts.waited_seconds)}: sent on to the operators (and "
        f"the runtime's owner, where it is theirs to answer) at "
        f"{facts.escalated_at.astimezone(dt.UTC).strftime('%H:%M UTC')}."
    )


def request_message(facts: RequestFacts, event: str) -> Message:
    """The plain-text message about one request's event: every fact, then the one link."""
    lines = request_lines(facts)
    if event == NotificationEvent.ESCALATED and facts.escalated_at is not None:
        lines.insert(0, escalation_words(facts))
    if event == NotificationEvent.ANSWERED:
        lines.append(
            f"Answered by: {facts.answered_by or 'the runtime or the expiry'} ({facts.status.lower()})"
        )
    lines += ["", f"Open: {facts.url}", LINK_NOTE]
    return Message(title=request_title(facts, event), text="\n".join(lines))


def digest_message(facts: list[RequestFacts]) -> Message:
    """One message for several requests (a digest, or what waited out quiet hours)."""
    count = len(facts)
    title = "1 request waits for you" if count == 1 else f"{count} requests wait for you"
    blocks = []
    for item in facts:
        blocks.append("\n".join([request_title(item, NotificationEvent.REQUESTED), *request_lines(item)]))
        blocks[-1] += f"\nOpen: {item.url}"
    return Message(title=title, text="\n\n".join([*blocks, LINK_NOTE]))


TEST_MESSAGE = Message(
    title="AIMON Admin: test message",
    text="This channel works: requests you may answer will be announced here.",
)


def webhook_payload(facts: RequestFacts | None, event: str, timestamp: dt.datetime) -> dict[str, object]:
    """The body every webhook carries: type, timestamp, data.request (a test: no request)."""
    body: dict[str, object] = {
        "type": EVENT_TYPES[event],
        "timestamp": timestamp.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
    }
    if facts is None:
        body["data"] = {"message": TEST_MESSAGE.text}
        return body
    request: dict[str, object] = {
        "id": facts.id,
        "kind": facts.kind,
        "runtime": facts.runtime,
        "session_id": facts.session_id,
        "principal": facts.principal or None,
    }
    if facts.kind == "TOOL":
        request["tool"] = facts.tool
        request["server"] = facts.server or None
        request["subject"] = shorten(facts.subject, SUBJECT_SHOWN_MAX) if facts.subject else None
    else:
        request["skills"] = list(facts.skills)
        request["subject"] = None
    request["reason"] = shorten(facts.reason, REASON_SHOWN_MAX) if facts.reason else ""
    request["expires_at"] = facts.expires_at.astimezone(dt.UTC).isoformat() if facts.expires_at else None
    request["status"] = facts.status
    request["url"] = facts.url
    if event == NotificationEvent.ESCALATED and facts.escalated_at is not None:
        request["escalated_at"] = facts.escalated_at.astimezone(dt.UTC).isoformat()
    if event == NotificationEvent.ANSWERED:
        request["answered_by"] = facts.answered_by or None
        request["decisions"] = [{"name": name, "decision": decision} for name, decision in facts.decisions]
    body["data"] = {"request": request}
    return body


def checkpoint_payload(document: dict[str, object], timestamp: dt.datetime) -> dict[str, object]:
    """A signed audit checkpoint's body (A4): `data` is the checkpoint document exactly as
    published (its canonical JSON and a newline are the published file), so a witness
    checks it, and the log against it, with the offline verifier. Nothing in it is secret."""
    return {
        "type": EVENT_TYPES[NotificationEvent.CHECKPOINT],
        "timestamp": timestamp.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "data": dict(document),
    }


# --- Where a channel may point (server-side request forgery, P6) -----------------------------------

PRIVATE_ADDRESS_MESSAGE = (
    "{host} is a private, loopback or link-local address ({address}); this server does not send there."
)
METADATA_ADDRESS_MESSAGE = "{host} is a link-local address ({address}); nothing is ever sent there."
SELF_ADDRESS_MESSAGE = "{host} is AIMON Admin itself; a channel cannot point back at it."
CARRIED_ADDRESS = "{address}, which carries {inner}"
_CARRIER_GRADE_NAT = ipaddress.ip_network("100.64.0.0/10")
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")
# Where an IPv4 address sits in an IPv6 address made from a NAT64 prefix of each length that
# fits the local-use block (RFC 6052, 2.2): its pieces, high to low, as (shift from the lowest
# bit, bits); the octet after the first 64 bits is never one of them.
_NAT64_LAYOUTS = (
    ((64, 16), (40, 16)),  # a /48 prefix
    ((64, 8), (32, 24)),  # /56
    ((24, 32),),  # /64
    ((0, 32),),  # /96
)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _nat64_carried(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a NAT64 address may stand for: the last 32 bits under the well-known
    prefix; under the local-use block, wherever a prefix of any length inside it puts them
    (a layout whose bits are all zero carries nothing; an address with none but those carries
    0.0.0.0)."""
    if ip in _NAT64_WELL_KNOWN:
        return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    if ip not in _NAT64_LOCAL_USE:
        return []
    carried = []
    for layout in _NAT64_LAYOUTS:
        value = 0
        for shift, bits in layout:
            value = (value << bits) | ((int(ip) >> shift) & ((1 << bits) - 1))
        if value:
            carried.append(ipaddress.IPv4Address(value))
    return carried or [ipaddress.IPv4Address(0)]


def embedded_addresses(ip: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries and a connection to it may reach (P6):
    IPv4-mapped (::ffff:a.b.c.d) and -translated (::ffff:0:a.b.c.d), IPv4-compatible
    (::a.b.c.d), 6to4 (2002::/16), Teredo (2001::/32: its server, and its client, the last
    32 bits inverted) and NAT64 (64:ff9b::/96, 64:ff9b:1::/48)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    carried: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        carried.append(ip.ipv4_mapped)
    if ip in _IPV4_TRANSLATED or (int(ip) >> 32 == 0 and int(ip) > 1):
        carried.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip.sixtofour is not None:
        carried.append(ip.sixtofour)
    if ip.teredo is not None:
        carried.extend(ip.teredo)
    carried.extend(_nat64_carried(ip))
    return carried


def _stands_for_ipv4(ip: Address) -> bool:
    """Whether `ip` only stands for the IPv4 address in it (IPv4-mapped or -translated, NAT64's
    well-known prefix): judged as that address alone, its block's own "reserved" aside."""
    return isinstance(ip, ipaddress.IPv6Address) and (
        ip.ipv4_mapped is not None or ip in _IPV4_TRANSLATED or ip in _NAT64_WELL_KNOWN
    )


def _never(ip: Address) -> bool:
    """Link-local (cloud metadata services live there), unspecified and multicast: never."""
    return ip.is_link_local or ip.is_unspecified or ip.is_multicast


def _private(ip: Address) -> bool:
    """Private, loopback, shared, site-local, reserved or otherwise not global."""
    return (
        ip.is_private
        or ip.is_loopback
        or ip.is_reserved
        or (isinstance(ip, ipaddress.IPv4Address) and ip in _CARRIER_GRADE_NAT)
        or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local)
        or not ip.is_global
    )


def address_problem(host: str, address: str, *, allow_private: bool) -> str | None:
    """Why `address` (what `host` resolved to) may not be sent to, or None (P6).

    Link-local (cloud metadata services live there) and unspecified addresses never; private,
    loopback, shared and reserved addresses only when the operator allows them. An address
    that carries another inside it is judged as each of them, refused if any is; one that only
    stands for an IPv4 address is judged as that address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return PRIVATE_ADDRESS_MESSAGE.format(host=host, address=address)
    judged: list[tuple[Address, str]] = [] if _stands_for_ipv4(ip) else [(ip, address)]
    judged += [
        (inner, CARRIED_ADDRESS.format(address=address, inner=inner)) for inner in embedded_addresses(ip)
    ]
    for candidate, shown in judged:
        if _never(candidate):
            return METADATA_ADDRESS_MESSAGE.format(host=host, address=shown)
    if allow_private:
        return None
    for candidate, shown in judged:
        if _private(candidate):
            return PRIVATE_ADDRESS_MESSAGE.format(host=host, address=shown)
    return None


def is_self(host: str, port: int | None, own: list[tuple[str, int | None]]) -> bool:
    """Whether host:port is one of the product's own addresses (a port None: any port)."""
    host = host.lower().rstrip(".").strip("[]")
    for own_host, own_port in own:
        if host == own_host.lower().rstrip(".").strip("[]") and (own_port is None or own_port == port):
            return True
    return False


# --- When -----------------------------------------------------------------------------------------

BACKOFF_FIRST_SECONDS = 10
BACKOFF_MAX_SECONDS = 600


def backoff_seconds(attempts: int) -> int:
    """How long to wait after `attempts` failed tries: 10 s, 20 s, 40 s ... at most 10 minutes."""
    return min(BACKOFF_FIRST_SECONDS * 2 ** max(attempts - 1, 0), BACKOFF_MAX_SECONDS)


def quiet_until(
    now: dt.datetime, *, start: dt.time | None, end: dt.time | None, timezone: str
) -> dt.datetime | None:
    """The end of the quiet hours `now` falls in (UTC), or None when `now` is not quiet.

    Quiet hours may wrap midnight (22:00-07:00); start == end is no quiet hours at all."""
    if start is None or end is None or start == end:
        return None
    zone = ZoneInfo(timezone)
    local = now.astimezone(zone)
    clock = local.time().replace(tzinfo=None)
    if start < end:
        quiet = start <= clock < end
        end_day = local.date()
    else:
        quiet = clock >= start or clock < end
        end_day = local.date() + dt.timedelta(days=1) if clock >= start else local.date()
    if not quiet:
        return None
    return dt.datetime.combine(end_day, end, tzinfo=zone).astimezone(dt.UTC)


def held_until(
    now: dt.datetime,
    *,
    digest_minutes: int,
    open_digest_due: dt.datetime | None,
    quiet_end: dt.datetime | None,
) -> dt.datetime | None:
    """When a person's message about a new request goes out if not now (None: now).

    A digest joins the one already waiting (`open_digest_due`) or starts one due in
    `digest_minutes`; quiet hours hold it until they end, whichever is later."""
    due = None
    if digest_minutes > 0:
        due = open_digest_due or now + dt.timedelta(minutes=digest_minutes)
    if quiet_end is not None:
        due = max(due, quiet_end) if due is not None else quiet_end
    return due
