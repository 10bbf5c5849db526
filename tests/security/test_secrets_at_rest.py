"""Secrets the product keeps for other systems are encrypted at rest (core.encryption).

MCP servers' env, headers and URL, people's Apprise URLs, webhooks' addresses and signing
secrets, made through the services, the pages and load_config, are never in clear in the
database (a raw SELECT of every table), in a dump (dumpdata), in an audit event, an audit
export, a log line, the runtime API or a page after the one that shows a new secret once.
Keys rotate end to end; a value no key opens fails closed (no sync, no send) and is named
on the operator's home, never a 500.
"""

from __future__ import annotations

import io
import json
import logging
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.export import jsonl_line
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core import encryption
from aimon_admin.core.actors import Actor
from aimon_admin.core.checks import secrets_key_configured
from aimon_admin.notifications import home as notifications_home
from aimon_admin.notifications import services as notify
from aimon_admin.notifications.choices import ChannelKind, DeliveryStatus
from aimon_admin.notifications.models import Channel
from aimon_admin.notifications.services.delivery import UNDECRYPTABLE
from aimon_admin.registry import home as registry_home
from aimon_admin.registry import services
from aimon_admin.registry.choices import McpTransport, SyncStatus
from aimon_admin.registry.models import McpServer
from aimon_admin.registry.sync.messages import ERROR_SECRETS_UNREADABLE
from aimon_admin.registry.sync.runs import run_sync
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import token_issue
from tests.audit_pages.test_export import streamed
from tests.notifications.receivers import http_receiver
from tests.security.test_no_secrets_in_logs import Everything

ACTOR = Actor.system("pytest")
ROOT = Path(__file__).resolve().parents[2]
ENV_SECRET = "env-secret-5b1f0c93"
HEADER_SECRET = "header-secret-90d2ae41"
URL_TOKEN = "url-token-3e77c1d8"
URL_PASSWORD = "url-pass-c40a9b12"
APPRISE_TOKEN = "apprise-token-7f3a2c61"
WEBHOOK_SECRET = "whsec_" + "c2VjcmV0LXdlYmhvb2sta2V5LWZvci10ZXN0cy0wMQ=="
CONFIG_ENV_SECRET = "config-env-secret-24e9d0"
CONFIG_HEADER_SECRET = "config-header-secret-8a1b5c"
CONFIG_WEBHOOK_SECRET = "whsec_" + "Y29uZmlnLXdlYmhvb2stc2VjcmV0LXRlc3RzLTAy"
SECRETS = {
    "env value": ENV_SECRET,
    "header value": HEADER_SECRET,
    "URL query token": URL_TOKEN,
    "URL password": URL_PASSWORD,
    "Apprise token": APPRISE_TOKEN,
    "webhook secret": WEBHOOK_SECRET,
    "webhook secret's key": WEBHOOK_SECRET.removeprefix("whsec_"),
    "config env value": CONFIG_ENV_SECRET,
    "config header value": CONFIG_HEADER_SECRET,
    "config webhook secret": CONFIG_WEBHOOK_SECRET,
    "config webhook secret's key": CONFIG_WEBHOOK_SECRET.removeprefix("whsec_"),
}
CONFIG = f"""\
mcpServers:
  from-config:
    command: {sys.executable}
    args: [-m, tests.registry.mcp_servers.catalog]
    env:
      API_KEY: {CONFIG_ENV_SECRET}
  from-config-http:
    url: http://127.0.0.1:9/mcp
    headers:
      X-Api-Key: {CONFIG_HEADER_SECRET}
webhooks:
  siem:
    url: http://127.0.0.1:9/siem
    secret: {CONFIG_WEBHOOK_SECRET}
"""
KEY_A, KEY_B = encryption.new_key(), encryption.new_key()


@pytest.fixture
def debug_logs() -> Iterator[Everything]:
    """Every record the product writes with LOG_LEVEL=DEBUG: the root at DEBUG, the loggers
    the product holds at INFO or above (a library that logs URLs whole) kept there."""
    handler = Everything()
    root = logging.getLogger()
    quiet = [
        logger
        for logger in logging.root.manager.loggerDict.values()
        if isinstance(logger, logging.Logger) and not logger.propagate
    ]
    saved = root.level
    root.setLevel(logging.DEBUG)
    for logger in (root, *quiet):
        logger.addHandler(handler)
    yield handler
    root.setLevel(saved)
    for logger in (root, *quiet):
        logger.removeHandler(handler)


def leaked(text: str) -> list[str]:
    return [name for name, value in SECRETS.items() if value in text]


def store_everything(owner: User, tmp_path: Path) -> dict[str, Any]:
    """One of each secret the product keeps, through the services and load_config."""
    stdio = services.mcp_server_create(
        name="stdio-with-env",
        transport=McpTransport.STDIO,
        command=sys.executable,
        env={"API_KEY": ENV_SECRET},
        actor=ACTOR,
    )
    http = services.mcp_server_create(
        name="http-with-headers",
        transport=McpTransport.STREAMABLE_HTTP,
        url=f"http://svc:{URL_PASSWORD}@127.0.0.1:9/mcp?token={URL_TOKEN}",
        headers={"Authorization": f"Bearer {HEADER_SECRET}"},
        actor=ACTOR,
    )
    chat = notify.channel_add(
        owner=owner,
        kind=ChannelKind.APPRISE,
        name="my chat",
        target=f"json://127.0.0.1:9/{APPRISE_TOKEN}",
        actor=ACTOR,
    )
    hook, _ = notify.webhook_create(
        name="ops", url="http://127.0.0.1:9/hook", secret=WEBHOOK_SECRET, actor=ACTOR
    )
    config = tmp_path / "aimon.yaml"
    config.write_text(CONFIG)
    call_command("load_config", str(config), stdout=io.StringIO())
    return {"stdio": stdio, "http": http, "chat": chat, "hook": hook}


def every_row_of_every_table() -> str:
    """The whole database as raw SELECTs return it, every table's every row."""
    rows = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")  # nosec B608 - names from the database
            rows.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(rows)


@pytest.mark.django_db
def test_no_stored_secret_is_in_clear_in_the_database_or_a_dump(approver: User, tmp_path: Path) -> None:
    stored = store_everything(approver, tmp_path)

    # Read through the models, each value is what was given.
    stdio = McpServer.objects.get(pk=stored["stdio"].pk)
    assert stdio.env == {"API_KEY": ENV_SECRET}
    http = McpServer.objects.get(pk=stored["http"].pk)
    assert http.headers == {"Authorization": f"Bearer {HEADER_SECRET}"}
    assert URL_TOKEN in http.url
    assert Channel.objects.get(pk=stored["chat"].pk).target.endswith(APPRISE_TOKEN)
    assert Channel.objects.get(pk=stored["hook"].pk).secret == WEBHOOK_SECRET
    assert McpServer.objects.get(name="from-config").env == {"API_KEY": CONFIG_ENV_SECRET}
    assert Channel.objects.get(name="siem").secret == CONFIG_WEBHOOK_SECRET

    # In the database: tokens, nothing in clear, on SQLite and PostgreSQL alike.
    raw = every_row_of_every_table()
    assert leaked(raw) == []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT env, headers, url FROM registry_mcpserver WHERE name = %s", ["http-with-headers"]
        )
        assert all(encryption.looks_like_token(value) for value in cursor.fetchone())

    # In a dump of everything: tokens too; and loading one reads the value back.
    out = io.StringIO()
    call_command("dumpdata", format="json", stdout=out)
    dump = out.getvalue()
    assert leaked(dump) == []
    (row,) = [
        r for r in json.loads(dump) if r["model"] == "notifications.channel" and r["pk"] == stored["hook"].pk
    ]
    assert encryption.looks_like_token(row["fields"]["secret"])
    assert Channel._meta.get_field("secret").to_python(row["fields"]["secret"]) == WEBHOOK_SECRET
    (server,) = [r for r in json.loads(dump) if r["model"] == "registry.mcpserver" and r["pk"] == stdio.pk]
    assert McpServer._meta.get_field("env").to_python(server["fields"]["env"]) == {"API_KEY": ENV_SECRET}


@pytest.mark.django_db(transaction=True)
def test_no_secret_in_audit_events_exports_logs_pages_or_the_api(
    debug_logs: Everything,
    operator: User,
    approver: User,
    auditor: User,
    runtime: AgentRuntime,
    tmp_path: Path,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    stored = store_everything(approver, tmp_path)
    client, reader = Client(), Client()
    client.force_login(operator)
    reader.force_login(auditor)
    seen, pages = [], []
    # The operator's pages: servers, their edit pages, webhooks, the home.
    for url in (
        reverse("core:home"),
        reverse("registry:server-list"),
        reverse("registry:server-detail", args=["http-with-headers"]),
        reverse("registry:server-edit", args=["http-with-headers"]),
        reverse("registry:server-edit", args=["stdio-with-env"]),
        reverse("notifications:webhooks"),
        reverse("notifications:log"),
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        pages.append(response.content.decode())
    # A change on the page, a rotation, syncs that fail (nothing listens on port 9).
    edited = client.post(
        reverse("registry:server-edit", args=["http-with-headers"]),
        {
            "transport": McpTransport.STREAMABLE_HTTP,
            "url": McpServer.objects.get(name="http-with-headers").url,
            "headers": "X-Extra: plain-value",
            "timeout_seconds": 5,
            "enabled": "on",
        },
    )
    assert edited.status_code == 302
    assert (
        McpServer.objects.get(name="http-with-headers").headers["Authorization"] == f"Bearer {HEADER_SECRET}"
    )
    notify.webhook_rotate(channel=stored["hook"], actor=ACTOR)
    with django_capture_on_commit_callbacks(execute=True):
        run = services.mcp_sync_request(server=stored["http"], actor=ACTOR)
    run.refresh_from_db()
    assert run.status == SyncStatus.FAILED
    seen.append(run.error)
    with django_capture_on_commit_callbacks(execute=True):
        notify.channel_test(channel=stored["chat"], actor=ACTOR)
    # The runtime API: the servers a runtime connects to.
    _row, token = token_issue(runtime=runtime, label="ci", actor=ACTOR)
    api = Client().get("/api/v1/mcp-servers", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert api.status_code == 200
    # The auditor's exports.
    for name in ("audit:export-csv", "audit:export-jsonl"):
        response = reader.get(reverse(name))
        assert response.status_code == 200, name
        seen.append(b"".join(streamed(response)).decode())

    audit = "\n".join(jsonl_line(event.content(), event.hash) for event in AuditEvent.objects.order_by("seq"))
    assert "MCP_SERVER_CREATED" in audit
    assert "WEBHOOK_SECRET_ROTATED" in audit
    # Operators' pages show the URL (it is edited there) and the API gives runtimes the URL
    # they connect to; neither ever shows env or header values.
    for text in ("\n".join(pages), api.content.decode()):
        assert [n for n in leaked(text) if n not in ("URL query token", "URL password")] == []
    for where, text in (
        ("audit events", audit),
        ("logs", "\n".join(debug_logs.lines)),
        ("run errors and exports", "\n".join(seen)),
    ):
        assert leaked(text) == [], where


@pytest.mark.django_db
def test_keys_rotate_end_to_end(approver: User, tmp_path: Path, settings: Any) -> None:
    settings.AIMON_SECRETS_KEY, settings.AIMON_SECRETS_KEY_FILE = KEY_A, ""
    stored = store_everything(approver, tmp_path)
    # The new key first: what is stored still reads (the old key decrypts), new values use it.
    settings.AIMON_SECRETS_KEY = f"{KEY_B},{KEY_A}"
    assert McpServer.objects.get(pk=stored["stdio"].pk).env == {"API_KEY": ENV_SECRET}
    out = io.StringIO()
    call_command("secrets_key", "show", stdout=out)
    assert f"key {encryption.key_id(KEY_A)} (decrypts only): opens 15 stored values" in out.getvalue()

    out = io.StringIO()
    call_command("secrets_key", "reencrypt", "--batch", "1", stdout=out)
    assert (
        "registry.McpServer.env: 4 re-encrypted, 0 already under the newest key, 0 unreadable"
        in out.getvalue()
    )
    event = AuditEvent.objects.filter(action=AuditAction.SECRETS_REENCRYPTED).get()
    assert event.subject == encryption.key_id(KEY_B)
    assert event.details["fields"]["notifications.Channel.secret"] == {
        "rewritten": 2,
        "current": 0,
        "unreadable": 0,
    }
    assert leaked(json.dumps(event.details)) == []
    # Run again (as after an interruption): everything is current, nothing rewritten.
    call_command("secrets_key", "reencrypt", stdout=io.StringIO())
    again = AuditEvent.objects.filter(action=AuditAction.SECRETS_REENCRYPTED).latest("seq")
    assert all(figures["rewritten"] == 0 for figures in again.details["fields"].values())

    # The old key dropped: everything still reads, syncs and sends.
    settings.AIMON_SECRETS_KEY = KEY_B
    assert McpServer.objects.get(name="from-config").env == {"API_KEY": CONFIG_ENV_SECRET}
    assert Channel.objects.get(pk=stored["hook"].pk).secret == WEBHOOK_SECRET
    assert registry_home.servers_with_unreadable_secrets() == []
    assert notifications_home.channels_with_unreadable_secrets() == []
    catalog = services.mcp_server_create(
        name="catalog",
        transport=McpTransport.STDIO,
        command=sys.executable,
        args=["-m", "tests.registry.mcp_servers.catalog"],
        env={"PYTHONPATH": str(ROOT), "API_KEY": ENV_SECRET},
        actor=ACTOR,
    )
    settings.AIMON_SECRETS_KEY = f"{encryption.new_key()},{KEY_B}"  # and the next rotation begins
    run = services.mcp_sync_request(server=catalog, actor=ACTOR)
    assert run_sync(run.pk).status == SyncStatus.SUCCEEDED
    with http_receiver() as receiver:
        hook, _ = notify.webhook_create(name="live", url=receiver.url(), secret=WEBHOOK_SECRET, actor=ACTOR)
        delivery = notify.channel_test(channel=hook, actor=ACTOR)
        notify.delivery_send(delivery_id=delivery.pk)
        (got,) = receiver.wait()
    assert got.headers["webhook-signature"].startswith("v1,")


@pytest.mark.django_db
def test_a_secret_no_key_opens_fails_closed_and_is_named_on_the_home(
    approver: User, operator: User, tmp_path: Path, settings: Any
) -> None:
    settings.AIMON_SECRETS_KEY, settings.AIMON_SECRETS_KEY_FILE = KEY_A, ""
    stored = store_everything(approver, tmp_path)
    with http_receiver() as receiver:
        hook, _ = notify.webhook_create(name="live", url=receiver.url(), secret=WEBHOOK_SECRET, actor=ACTOR)
        # Tampered with in the database: one server's env and one channel's secret.
        with connection.cursor() as cursor:
            cursor.execute("SELECT env FROM registry_mcpserver WHERE id = %s", [stored["stdio"].pk])
            (token,) = cursor.fetchone()
            flipped = token[:-6] + ("A" if token[-6] != "A" else "B") + token[-5:]
            cursor.execute(
                "UPDATE registry_mcpserver SET env = %s WHERE id = %s", [flipped, stored["stdio"].pk]
            )
        # And a key dropped before re-encrypting: everything else reads as unreadable too.
        settings.AIMON_SECRETS_KEY = KEY_B

        server = McpServer.objects.get(pk=stored["stdio"].pk)
        assert encryption.is_unreadable(server.env)
        assert not server.env
        run = services.mcp_sync_request(server=server, actor=ACTOR)
        synced = run_sync(run.pk)
        assert (synced.status, synced.error) == (SyncStatus.FAILED, ERROR_SECRETS_UNREADABLE)
        delivery = notify.channel_test(channel=hook, actor=ACTOR)
        notify.delivery_send(delivery_id=delivery.pk)
        delivery.refresh_from_db()
        assert (delivery.status, delivery.last_error) == (DeliveryStatus.FAILED, UNDECRYPTABLE)
        assert receiver.got == []  # nothing was sent

        client = Client()
        client.force_login(operator)
        home = client.get(reverse("core:home"))
        assert home.status_code == 200
        page = home.content.decode()
        assert registry_home.SECRETS_LABEL[1] in page
        assert notifications_home.SECRETS_LABEL[1] in page
        for url in (
            reverse("registry:server-detail", args=[server.name]),
            reverse("registry:server-edit", args=[server.name]),
            reverse("notifications:webhooks"),
        ):
            assert client.get(url).status_code == 200, url
        # Saving another setting keeps what is stored, so the key's return brings it back.
        saved = client.post(
            reverse("registry:server-edit", args=[server.name]),
            {
                "transport": McpTransport.STDIO,
                "command": sys.executable,
                "timeout_seconds": 7,
                "enabled": "on",
            },
        )
        assert saved.status_code == 302
        settings.AIMON_SECRETS_KEY = f"{KEY_B},{KEY_A}"
        assert McpServer.objects.get(pk=stored["http"].pk).headers == {
            "Authorization": f"Bearer {HEADER_SECRET}"
        }
        assert Channel.objects.get(pk=hook.pk).secret == WEBHOOK_SECRET
        assert encryption.is_unreadable(McpServer.objects.get(pk=server.pk).env)  # tampered stays so
        out = io.StringIO()
        with pytest.raises(Exception, match="open with no configured key"):
            call_command("secrets_key", "reencrypt", stdout=out)
        assert (
            "registry.McpServer.env: 3 re-encrypted, 0 already under the newest key, 1 unreadable"
            in out.getvalue()
        )
        event = AuditEvent.objects.filter(action=AuditAction.SECRETS_REENCRYPTED).get()
        assert event.level == AuditLevel.WARNING


@pytest.fixture
def no_key(settings: Any) -> Iterator[Any]:
    settings.AIMON_SECRETS_KEY, settings.AIMON_SECRETS_KEY_FILE = "", ""
    return settings


def test_a_missing_or_wrong_key_is_an_error_naming_the_setting(no_key: Any, tmp_path: Path) -> None:
    with pytest.raises(ImproperlyConfigured, match="Neither AIMON_SECRETS_KEY nor AIMON_SECRETS_KEY_FILE"):
        encryption.key_ring()
    assert [error.id for error in secrets_key_configured()] == ["core.E001"]
    no_key.AIMON_SECRETS_KEY = f"{KEY_A},not-a-key"
    with pytest.raises(ImproperlyConfigured, match="AIMON_SECRETS_KEY: key 2 is not a Fernet key"):
        encryption.key_ring()
    no_key.AIMON_SECRETS_KEY_FILE = str(tmp_path / "key")
    with pytest.raises(ImproperlyConfigured, match="not both"):
        encryption.key_ring()
    no_key.AIMON_SECRETS_KEY = ""
    with pytest.raises(ImproperlyConfigured, match="does not exist"):
        encryption.key_ring()
    assert secrets_key_configured() != []


def test_secrets_key_create_writes_an_owner_only_file_and_never_replaces_it(
    no_key: Any, tmp_path: Path
) -> None:
    path = tmp_path / "secrets-key"
    out = io.StringIO()
    call_command("secrets_key", "create", str(path), stdout=out)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = path.read_text().strip()
    assert encryption.key_id(key) in out.getvalue()
    assert key not in out.getvalue()
    call_command("secrets_key", "create", str(path), "--if-missing", stdout=io.StringIO())
    assert path.read_text().strip() == key
    with pytest.raises(Exception, match="never replaced"):
        call_command("secrets_key", "create", str(path))
    no_key.AIMON_SECRETS_KEY_FILE = str(path)
    assert secrets_key_configured() == []
    assert encryption.decrypt(encryption.encrypt("x")) == "x"
    printed = io.StringIO()
    call_command("secrets_key", "create", stdout=printed)
    assert len(printed.getvalue().strip()) == 44  # a key to put in AIMON_SECRETS_KEY


@pytest.mark.django_db
def test_the_migration_step_encrypts_what_is_stored_in_clear_and_going_back_decrypts_it() -> None:
    server = services.mcp_server_create(
        name="before", transport=McpTransport.STDIO, command="run", env={"API_KEY": ENV_SECRET}, actor=ACTOR
    )
    # As the column held it before the migration: JSON in clear.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE registry_mcpserver SET env = %s WHERE id = %s",
            [json.dumps({"API_KEY": ENV_SECRET}), server.pk],
        )
    fields = ("env", "headers", "url")
    # What the step reads of a migration's schema editor: its connection (SQLite's own editor
    # cannot be opened inside a test's transaction).
    editor = SimpleNamespace(connection=connection)
    encryption.migrate_columns(McpServer, editor, fields, seal=True)
    encryption.migrate_columns(McpServer, editor, fields, seal=True)  # again: nothing changes
    assert leaked(every_row_of_every_table()) == []
    assert McpServer.objects.get(pk=server.pk).env == {"API_KEY": ENV_SECRET}
    encryption.migrate_columns(McpServer, editor, fields, seal=False)
    with connection.cursor() as cursor:
        cursor.execute("SELECT env FROM registry_mcpserver WHERE id = %s", [server.pk])
        assert json.loads(cursor.fetchone()[0]) == {"API_KEY": ENV_SECRET}


@pytest.mark.django_db
def test_the_homes_finding_of_unreadable_secrets_is_kept_until_a_row_changes(
    approver: User, tmp_path: Path, settings: Any
) -> None:
    """Finding a secret no key opens decrypts the whole table: the operator's home does it at
    most once per UNREADABLE_KEPT_SECONDS, and a save of a row forgets what was found."""
    settings.AIMON_SECRETS_KEY, settings.AIMON_SECRETS_KEY_FILE = KEY_A, ""
    stored = store_everything(approver, tmp_path)
    assert registry_home.servers_with_unreadable_secrets() == []
    with connection.cursor() as cursor:  # tampered with behind the product's back: no signal
        cursor.execute("SELECT env FROM registry_mcpserver WHERE id = %s", [stored["stdio"].pk])
        (token,) = cursor.fetchone()
        flipped = token[:-6] + ("A" if token[-6] != "A" else "B") + token[-5:]
        cursor.execute("UPDATE registry_mcpserver SET env = %s WHERE id = %s", [flipped, stored["stdio"].pk])
    assert registry_home.servers_with_unreadable_secrets() == []  # the kept finding

    McpServer.objects.get(pk=stored["http"].pk).save()  # any change through the product
    assert registry_home.servers_with_unreadable_secrets() == [McpServer.objects.get(pk=stored["stdio"].pk)]
    settings.AIMON_SECRETS_KEY = KEY_B  # another key set: found afresh, everything unreadable
    assert (
        len(registry_home.servers_with_unreadable_secrets())
        == McpServer.objects.filter(retired_at__isnull=True).count()
    )
