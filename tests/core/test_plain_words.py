"""Words, not codes: what a person reads on any page is plain words.

Every HTML page the authorization matrix knows (tests/security/test_authorization_matrix.py
walks the URL configuration) is opened as every person who may open it, with demo-like data
present (the matrix's world, the browser sweep's fuller states, `demo_data`, a pending tool
call, tools of every kind of axes, a runtime whose ceiling hides writes, a review finding).
So is what an empty POST of every form sends back (its errors and messages), and a few
pages in other states (a bad filter, the simulator on another runtime, the error pages).

A page fails if its visible text holds a bare enum code (a value of any TextChoices of the
product: MUTATING, NON_IDEMPOTENT, ABOVE_CEILING, SESSION …), a rule id ("(S13)", "T6",
"U1-U7"), "§", "seed" or a design document's name. What people do not read as text is not
looked at: attributes such as title (where the `{% words %}` tag keeps the exact code, on
hover) and data-*, scripts and styles. A code meant to be read, in a details line for
operators, is written by the same tag as <code class="enum-code">, and only there is a code
not bare. JSON shown as it was sent or recorded (<pre class="json">: a runtime's declaration,
an audit event's details) is the wire contract, codes and all.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.apps import apps
from django.core.management import call_command
from django.db import models, transaction
from django.test import Client
from django.urls import reverse

from aimon_admin.approvals import services
from aimon_admin.approvals.choices import RequestKind
from aimon_admin.audit.models import AuditEvent
from aimon_admin.registry.choices import AnnotationTrust, McpTransport, ReviewFinding
from aimon_admin.registry.models import Tool
from aimon_admin.registry.services import (
    local_tools_replace,
    mcp_server_create,
    mcp_tools_record,
    tool_record_review,
    tool_subject_set,
)
from aimon_admin.runtimes.services import runtime_update_settings
from tests.browser.sweep import enrich
from tests.conftest import TEST_ACTOR
from tests.security.test_authorization_matrix import (
    EXPECTED,
    HTMX_FRAGMENTS,
    MOVED,
    OK,
    PEOPLE,
    ROUTES,
    SEE_OTHER,
    World,
    client_for,
    path_of,
)
from tests.security.test_authorization_matrix import world as matrix_world

world = matrix_world

# --- What may not be read -----------------------------------------------------------------------

# Upper-case values that are also plain words of the product, not codes (CHECKPOINT: the
# verifier's command line on the checkpoints page names CHECKPOINT-DIRECTORY).
NOT_CODES = frozenset({"MCP", "CHECKPOINT"})


def enum_codes() -> set[str]:
    """Every value of every TextChoices in the product's apps' choices modules (upper-case
    ones: lower-case values such as the roles' are words already)."""
    codes: set[str] = set()
    for config in apps.get_app_configs():
        if not config.name.startswith("aimon_admin."):
            continue
        name = f"{config.name}.choices"
        if importlib.util.find_spec(name) is None:
            continue
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, models.TextChoices):
                codes.update(v for v in value.values if v.isupper())
    return codes - NOT_CODES


RULE_NUMBER = r"\b[TSAUP]\d{1,2}\b(?!-compatible)"  # S3-compatible storage is no rule
OTHER_MARKS = [r"§", r"\bseed\b", r"\bDESIGN\.md\b", r"\bAPI\.md\b"]


def forbidden_pattern(codes: set[str]) -> re.Pattern[str]:
    words = "|".join(sorted((re.escape(code) for code in codes), key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9_])(?:{words})(?![A-Za-z0-9_])|{RULE_NUMBER}|{'|'.join(OTHER_MARKS)}")


# --- The visible text of a page -----------------------------------------------------------------

INVISIBLE = {"script", "style", "template"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
# Attributes a person reads or hears: placeholders, labels for screen readers, alternatives,
# and the text of an <input type="submit">.
READ_ATTRIBUTES = ("placeholder", "aria-label", "alt")


class VisibleText(HTMLParser):
    """The text a person reads on a page: text nodes outside scripts and styles, and the
    attributes above; never title or data-*. A <code class="enum-code"> is a code shown on
    purpose (the words tag's details line), a <pre class="json"> JSON as sent or recorded:
    both are left out."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.stack: list[tuple[str, bool]] = []  # (tag, hidden from this check)

    def _skipping(self) -> bool:
        return any(skip for _, skip in self.stack)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        skip = (
            tag in INVISIBLE
            or (tag == "code" and "enum-code" in classes)
            or (tag == "pre" and "json" in classes)
        )
        if not self._skipping() and not skip:
            for name in READ_ATTRIBUTES:
                if attributes.get(name):
                    self.parts.append(str(attributes[name]))
            if tag == "input" and attributes.get("type") in ("submit", "button") and attributes.get("value"):
                self.parts.append(str(attributes["value"]))
        if tag not in VOID:
            self.stack.append((tag, skip))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID and self.stack and self.stack[-1][0] == tag:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index][0] == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        if not self._skipping() and data.strip():
            self.parts.append(data)


def visible_text(html: str) -> str:
    parser = VisibleText()
    parser.feed(html)
    parser.close()
    return " ".join(" ".join(part.split()) for part in parser.parts)


def codes_in(text: str, pattern: re.Pattern[str]) -> list[str]:
    """Each forbidden thing found, with a little of the text around it."""
    found = []
    for match in pattern.finditer(text):
        start, end = max(0, match.start() - 50), min(len(text), match.end() + 50)
        found.append(f"{match.group(0)!r} in …{text[start:end]}…")
    return found


# --- The world: the matrix's, and more ----------------------------------------------------------


@dataclass
class WordsWorld:
    world: World
    extra: list[tuple[str, str, str]]  # (what, path, who)


def fuller(world: World, settings: Any, tmp_path: Path) -> list[tuple[str, str, str]]:
    """Demo-like data on top of the matrix's world; returns extra pages to visit."""
    fork, sessionless, _ = enrich(world)
    settings.DEMO = True
    settings.DEMO_CREDENTIALS_FILE = tmp_path / "credentials.json"
    call_command("demo_data", stdout=StringIO())

    runtime = world.runtime
    # A pending tool call (part U) of a destructive tool, with its subject argument named.
    local_tools_replace(
        runtime=runtime,
        tools=[
            {"name": "grep", "description": "search", "side_effect_level": "READ_ONLY"},
            {"name": "Bash", "description": "Run a shell command."},
            {
                "name": "Edit",
                "description": "Edit a file.",
                "side_effect_level": "MUTATING",
                "destructive_behavior": "NON_DESTRUCTIVE",
                "idempotency_behavior": "IDEMPOTENT",
            },
            {"name": "drop_table", "description": "Drops a table"},
        ],
        actor=TEST_ACTOR,
    )
    tool_subject_set(server=None, tool="Bash", argument="command", actor=TEST_ACTOR)
    tool_request, _ = services.request_create(
        services.RequestInput(
            runtime=runtime,
            skills=[],
            kind=RequestKind.TOOL,
            tool="Bash",
            arguments={"command": "git push origin main"},
            session_id="s-alice",
            principal="alice",
            reason="Push the fix.",
        )
    )
    # An MCP server whose claims are trusted: tools of each kind of axes.
    trusted = mcp_server_create(
        name="db",
        transport=McpTransport.STDIO,
        command="/bin/false",
        annotation_trust=AnnotationTrust.TRUST,
        actor=TEST_ACTOR,
    )
    mcp_tools_record(
        server=trusted,
        listing=[
            {"name": "query", "description": "Read rows", "annotations": {"readOnlyHint": True}},
            {
                "name": "insert",
                "description": "Add a row",
                "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
            },
            {"name": "drop", "description": "Drop a table", "annotations": {"readOnlyHint": False}},
        ],
        actor=TEST_ACTOR,
        complete=True,
    )
    # A call of a trusted server's tool: its card says how far the server is trusted.
    mcp_request, _ = services.request_create(
        services.RequestInput(
            runtime=runtime,
            skills=[],
            kind=RequestKind.TOOL,
            tool="drop",
            server="db",
            arguments={"table": "users"},
            session_id="s-alice",
            principal="alice",
        )
    )
    # A reviewed tool, and a runtime whose ceiling hides every write.
    drop_table = Tool.objects.get(runtime=runtime, name="drop_table")
    tool_record_review(
        tool=drop_table, finding=ReviewFinding.SHOULD_DECLARE_NON_DESTRUCTIVE, note="", actor=TEST_ACTOR
    )
    runtime_update_settings(
        runtime=world.other_runtime,
        actor=TEST_ACTOR,
        ceiling="READ_ONLY",
        exempt_at_or_below="READ_ONLY",
        owner=None,
        description="",
    )
    # Every audit event's page: what it recorded, in words where a value is a code.
    events = [
        (f"audit event #{seq}", reverse("audit:event", args=[seq]), "auditor")
        for seq in AuditEvent.objects.order_by("seq").values_list("seq", flat=True)
    ]
    simulator = reverse("registry:simulator")
    worklist = reverse("registry:worklist")
    audit_log = reverse("audit:log")
    return [
        ("request (fork)", reverse("approvals:request", args=[fork.pk]), "alice"),
        ("request (sessionless)", reverse("approvals:request", args=[sessionless.pk]), "alice"),
        ("request (tool call)", reverse("approvals:request", args=[tool_request.pk]), "alice"),
        ("request (tool call)", reverse("approvals:request", args=[tool_request.pk]), "operator"),
        ("request (MCP tool call)", reverse("approvals:request", args=[mcp_request.pk]), "alice"),
        ("tool page (reviewed)", reverse("registry:tool-detail", args=[drop_table.pk]), "operator"),
        ("tool review (reviewed)", reverse("registry:tool-review", args=[drop_table.pk]), "operator"),
        ("server page (trusted)", reverse("registry:server-detail", args=["db"]), "operator"),
        ("server trust", reverse("registry:server-trust", args=["db"]), "operator"),
        ("simulator (ceiling)", f"{simulator}?runtime=agent-two", "operator"),
        ("simulator (unattended)", f"{simulator}?runtime=agent-one&mode=unattended", "operator"),
        ("worklist", f"{worklist}?runtime=agent-one", "auditor"),
        ("tool list (filtered)", f"{reverse('registry:tool-list')}?q=d", "auditor"),
        ("audit log (bad filter)", f"{audit_log}?runtime=nope&level=LOUD", "auditor"),
        ("help: the API guide", reverse("core:help-page", args=["api"]), "anonymous"),
        ("help: operations", reverse("core:help-page", args=["operations"]), "operator"),
        ("error 404", "/no-such-page/", "alice"),
        ("error 403", reverse("runtimes:list"), "alice"),
        *events,
    ]


@pytest.fixture
def words_world(world: World, settings: Any, tmp_path: Path) -> WordsWorld:
    return WordsWorld(world, fuller(world, settings, tmp_path))


# --- The sweep ----------------------------------------------------------------------------------

PERSONS = PEOPLE  # anonymous, alice, bob, operator, auditor, owner
WRITES_SHOWN = {OK, SEE_OTHER, MOVED}


def _html(response: Any) -> str | None:
    if "text/html" not in response.get("Content-Type", ""):
        return None
    return response.content.decode()


def _follow(client: Client, response: Any, limit: int = 3) -> Any:
    """A redirect followed as a browser would, within the caller's transaction."""
    while response.status_code in (301, 302, 303) and limit:
        response = client.get(response["Location"])
        limit -= 1
    return response


def sweep(words: WordsWorld) -> tuple[dict[str, list[str]], set[str]]:
    """Every page and every empty POST's answer, as everyone who may: what each shows that
    it should not, keyed by what was opened by whom; and which pages were read."""
    pattern = forbidden_pattern(enum_codes())
    world = words.world
    found: dict[str, list[str]] = {}
    read: set[str] = set()
    clients = {who: client_for(who, world) for who in PERSONS}

    def check(what: str, response: Any) -> None:
        html = _html(response)
        if html is not None and response.status_code in (200, 403, 404, 405):
            read.add(response.wsgi_request.path)
            hits = codes_in(visible_text(html), pattern)
            if hits:
                found[what] = hits

    for route in ROUTES:
        expect = EXPECTED.get(route.key)
        if expect is None:
            continue
        path = path_of(route, world)
        headers = {"HX-Request": "true"} if route.key in HTMX_FRAGMENTS else {}
        for who in PERSONS:
            client = clients[who]
            if expect.get[who] in (OK, MOVED):
                check(f"GET {route.key} as {who}", _follow(client, client.get(path, headers=headers)))
            if expect.post[who] in WRITES_SHOWN and not path.startswith(("/api/", "/access/")):
                # A client of its own: a POST may sign its sender out (the rollback does not
                # give the cookie back).
                with transaction.atomic():
                    poster = client_for(who, world)
                    response = _follow(poster, poster.post(path, headers=headers))
                    check(f"POST {route.key} as {who}", response)
                    transaction.set_rollback(True)
    for what, path, who in words.extra:
        check(f"{what} as {who}", clients[who].get(path))
    return found, read


def test_pages_and_messages_say_plain_words_not_codes(words_world: WordsWorld) -> None:
    # Codes (MUTATING, ABOVE_CEILING, "(S13)", "§8.1") leave what people read.
    found, read = sweep(words_world)
    # Signed in as each person the whole way (a sign-out on the way once left the rest of the
    # sweep reading the sign-in page): most of the product's pages were read.
    assert len(read) > 60, sorted(read)
    report = "\n".join(f"{what}:\n    " + "\n    ".join(hits) for what, hits in sorted(found.items()))
    assert found == {}, report


# --- The API's documentation -------------------------------------------------------------------


def schema_texts(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every summary, description and title in the OpenAPI document, with where it is."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("summary", "description", "title") and isinstance(value, str):
                yield f"{where}/{key}", value
            else:
                yield from schema_texts(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from schema_texts(value, f"{where}/{index}")


def test_the_api_documentation_names_no_rule_numbers() -> None:
    # /api/docs/ is read by people too. Its enum codes are the wire contract and stay; the
    # rule ids ("(S9)", "T6-T9") do not.
    out = StringIO()
    call_command("spectacular", stdout=out)
    pattern = re.compile(f"{RULE_NUMBER}|{'|'.join(OTHER_MARKS)}")
    found = [
        f"{where}: {text[max(0, m.start() - 40) : m.end() + 10]!r}"
        for where, text in schema_texts(yaml.safe_load(out.getvalue()))
        for m in pattern.finditer(text)
    ]
    assert found == []


# --- The checker itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("html", "found"),
    [
        ('<p>It is <span class="badge">MUTATING</span>.</p>', ["MUTATING"]),
        ("<p>A session answer made agent-wide (S6).</p>", ["S6"]),
        ("<p>What the gate decides (T6-T9).</p>", ["T6", "T9"]),
        ("<h2>Destructive review (seed §8.1)</h2>", ["§", "seed"]),  # outside-citation-ok
        ('<input placeholder="READ_ONLY">', ["READ_ONLY"]),
        ('<button aria-label="Deny: SESSION">x</button>', ["SESSION"]),
        ('<option value="MUTATING">Writes</option>', []),
        ('<span title="ABOVE_CEILING" data-reason="ABOVE_CEILING">Above its ceiling</span>', []),
        ('<script>const level = "MUTATING";</script><style>[data-x="T6"]{}</style>', []),
        ('<small>Code: <code class="enum-code">NON_IDEMPOTENT</code></small>', []),
        ('<pre class="json">{"side_effect_level": "READ_ONLY"}</pre><pre>READ_ONLY</pre>', ["READ_ONLY"]),
        ("<p>MCP servers, Session 3, Test run, an idempotent tool, T-shirt, U2F key</p>", []),
    ],
)
def test_the_sweep_reads_what_people_read(html: str, found: list[str]) -> None:
    pattern = forbidden_pattern({"MUTATING", "READ_ONLY", "SESSION", "ABOVE_CEILING", "NON_IDEMPOTENT"})
    assert sorted(m.group(0) for m in pattern.finditer(visible_text(html))) == sorted(found)


def test_the_codes_come_from_the_enums() -> None:
    codes = enum_codes()
    assert {
        "MUTATING",
        "NON_IDEMPOTENT",
        "ABOVE_CEILING",
        "DESTRUCTIVE_ALWAYS_ASKS",
        "SESSION",
        "AGENT",
    } <= codes
    assert "MCP" not in codes
