"""MCP sync against real SDK servers, over stdio and streamable HTTP (T10-T15, A3).

The servers are in tests/registry/mcp_servers; stdio ones are child processes, HTTP ones
run in-process under uvicorn. Syncs go through `mcp_sync_request` and the Celery task,
which runs eagerly here, once the request's transaction commits.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import mcp_types as types
import psycopg
import pytest
from billiard.pool import soft_timeout_sighandler
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.core.context import Channel
from aimon_admin.core.plurals import counted
from aimon_admin.registry import policy
from aimon_admin.registry.choices import AnnotationTrust, McpTransport, SyncStatus
from aimon_admin.registry.models import McpServer, McpSyncRun, Tool
from aimon_admin.registry.services import (
    SYNC_ALREADY_ACTIVE,
    RegistryError,
    mcp_server_create,
    mcp_sync_request,
    mcp_tools_record,
)
from aimon_admin.registry.sync import (
    MAX_ATTEMPTS,
    RUN_LOCK_NAMESPACE,
    SYNC_ACTOR,
    SyncError,
    fetch_tool_listing,
    sync_runs_fail_stale,
)
from aimon_admin.registry.sync.messages import (
    DETAIL_HTTP_STATUS,
    DETAIL_NOT_JSON_RPC,
    DETAIL_STDERR,
    ERROR_CLOSED,
    ERROR_COMMAND_NOT_FOUND,
    ERROR_DISABLED,
    ERROR_GAVE_UP,
    ERROR_PROTOCOL,
    ERROR_SERVER_ERROR,
    ERROR_STALE,
    ERROR_TIME_LIMIT,
    ERROR_TIMED_OUT,
    ERROR_TOO_MANY_PAGES,
    ERROR_TOO_MANY_TOOLS,
    ERROR_UNREACHABLE,
    PROGRESS_DONE,
    PROGRESS_FAILED,
    PROGRESS_LISTED,
    STAGE_INITIALIZE,
    STAGE_PAGE,
)
from aimon_admin.registry.tasks import sync_mcp_server
from tests.conftest import TEST_ACTOR
from tests.core.metrics_support import moved, scrape
from tests.ports import free_port
from tests.registry.mcp_servers import catalog, hanging, misbehaving, paginated
from tests.registry.mcp_servers.http import not_mcp_app, serve_asgi, serve_http

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
STDIO, HTTP = McpTransport.STDIO, McpTransport.STREAMABLE_HTTP
SERVER_MODULES = {"catalog": catalog, "paginated": paginated, "hanging": hanging, "misbehaving": misbehaving}

WORST = ("MUTATING", "DESTRUCTIVE", "NON_IDEMPOTENT")
# T11 under TRUST for catalog v1: level from readOnlyHint, then READ_ONLY => NON_DESTRUCTIVE.
TRUSTED_V1 = {
    "lookup_record": ("READ_ONLY", "NON_DESTRUCTIVE", "IDEMPOTENT"),
    "upsert_record": ("MUTATING", "NON_DESTRUCTIVE", "IDEMPOTENT"),
    "append_note": ("MUTATING", "NON_DESTRUCTIVE", "NON_IDEMPOTENT"),
    "delete_record": ("MUTATING", "DESTRUCTIVE", "IDEMPOTENT"),
    "transfer_funds": ("MUTATING", "DESTRUCTIVE", "NON_IDEMPOTENT"),
    "inspect_disk": ("READ_ONLY", "NON_DESTRUCTIVE", "NON_IDEMPOTENT"),
    "bare_tool": WORST,
    "sloppy_flags": ("MUTATING", "NON_DESTRUCTIVE", "NON_IDEMPOTENT"),  # "yes" and 1 count as absent
    "vendor_extras": ("MUTATING", "NON_DESTRUCTIVE", "IDEMPOTENT"),
}
V1_NAMES = sorted(TRUSTED_V1)


# --- helpers ------------------------------------------------------------------------------------


def axes(tool: Tool) -> tuple[str, str, str]:
    return (tool.side_effect_level, tool.destructive_behavior, tool.idempotency_behavior)


def tools_of(server: McpServer) -> dict[str, Tool]:
    return {tool.name: tool for tool in Tool.objects.filter(server=server)}


def tool_rows(server: McpServer) -> list[dict[str, Any]]:
    """Every stored column of every tool of `server`, to prove a failed sync wrote nothing."""
    return list(Tool.objects.filter(server=server).order_by("name").values())


def events(server: McpServer, *actions: AuditAction) -> list[AuditEvent]:
    """The server's audit events (and its tools', whose subject is "server/tool"), in order."""
    found = AuditEvent.objects.filter(Q(subject=server.name) | Q(subject__startswith=f"{server.name}/"))
    return list(found.filter(action__in=actions).order_by("seq"))


@pytest.fixture
def variant_file(tmp_path: Path) -> Path:
    path = tmp_path / "variant"
    path.write_text("v1")
    return path


@pytest.fixture
def make_server(db: None) -> Callable[..., McpServer]:
    """An McpServer row (through the service, so it is audited like any other)."""
    count = 0

    def make(
        transport: str, *, trust: str = AnnotationTrust.IGNORE, timeout: int = 10, **fields: Any
    ) -> McpServer:
        nonlocal count
        count += 1
        return mcp_server_create(
            name=f"test-{count}",
            transport=transport,
            timeout_seconds=timeout,
            annotation_trust=trust,
            actor=TEST_ACTOR,
            **fields,
        )

    return make


@pytest.fixture
def connect(make_server: Callable[..., McpServer]) -> Iterator[Callable[..., McpServer]]:
    """`connect(transport, "catalog", variant_file=…)`: one of the test servers, reached over
    `transport`: a child process (CLI options) or an in-process HTTP server (build_server kwargs)."""
    with ExitStack() as stack:

        def connect(
            transport: str,
            module: str,
            *,
            trust: str = AnnotationTrust.IGNORE,
            timeout: int = 10,
            env: dict[str, str] | None = None,
            **options: Any,
        ) -> McpServer:
            if transport == STDIO:
                args = ["-m", f"tests.registry.mcp_servers.{module}"]
                for key, value in options.items():
                    args += [f"--{key.replace('_', '-')}", str(value)]
                return make_server(
                    STDIO,
                    trust=trust,
                    timeout=timeout,
                    command=sys.executable,
                    args=args,
                    env={"PYTHONPATH": str(ROOT), **(env or {})},
                )
            url = stack.enter_context(serve_http(SERVER_MODULES[module].build_server(**options)))
            return make_server(HTTP, trust=trust, timeout=timeout, url=url)

        yield connect


@pytest.fixture
def operator_actor(operator: User) -> Actor:
    return Actor.for_user(operator)


@pytest.fixture
def sync(
    django_capture_on_commit_callbacks: Callable[..., Any], operator_actor: Actor
) -> Callable[[McpServer], McpSyncRun]:
    """Request a sync the way the UI does; the eager task runs when the request commits."""

    def sync(server: McpServer) -> McpSyncRun:
        with django_capture_on_commit_callbacks(execute=True):
            run = mcp_sync_request(server=server, actor=operator_actor)
        run.refresh_from_db()
        return run

    return sync


def store_earlier_sync(server: McpServer) -> list[dict[str, Any]]:
    """Tools an earlier sync stored, so a failing sync has something to leave alone."""
    mcp_tools_record(server=server, listing=catalog.listing(), actor=TEST_ACTOR, complete=True)
    return tool_rows(server)


both_transports = pytest.mark.parametrize("transport", [STDIO, HTTP], ids=["stdio", "http"])


# --- what a sync stores -------------------------------------------------------------------------


# Resolution does not depend on the transport: stdio once, under TRUST, is enough.
@pytest.mark.parametrize(
    ("transport", "trust"),
    [(STDIO, AnnotationTrust.TRUST), (HTTP, AnnotationTrust.IGNORE), (HTTP, AnnotationTrust.TRUST)],
    ids=["stdio-TRUST", "http-IGNORE", "http-TRUST"],
)
def test_sync_stores_every_tool_with_its_claims_verbatim_and_resolves_them_once(
    connect: Callable[..., McpServer],
    sync: Callable[..., McpSyncRun],
    transport: str,
    trust: str,
    operator: User,
) -> None:
    server = connect(transport, "catalog", trust=trust)
    run = sync(server)

    assert (run.status, run.error, run.attempts) == (SyncStatus.SUCCEEDED, "", 1)
    assert (run.tools_seen, run.tools_added, run.tools_changed, run.tools_absent) == (9, 9, 0, 0)
    assert run.progress == counted(PROGRESS_DONE, 9, added=9, changed=0, absent=0)
    assert run.started_at is not None
    assert run.finished_at is not None
    assert run.requested_by == operator

    stored = tools_of(server)
    assert sorted(stored) == V1_NAMES
    for sent in catalog.listing():  # T10: every field as sent, unknown ones and wrong types too
        tool = stored[sent["name"]]
        assert (tool.claims, tool.description, tool.input_schema) == (
            sent.get("annotations"),
            sent["description"],
            sent["inputSchema"],
        )
        assert tool.present
        assert tool.resolved_under_trust == trust
    assert stored["sloppy_flags"].claims == {
        "readOnlyHint": "yes",
        "destructiveHint": False,
        "idempotentHint": 1,
    }
    assert stored["vendor_extras"].claims["x-vendor-risk"] == "low"
    assert stored["vendor_extras"].claims["audience"] == ["ops", "finance"]
    assert stored["bare_tool"].claims is None
    assert stored["sloppy_flags"].claim_warnings == [
        policy.HINT_WRONG_TYPE.format(hint="readOnlyHint", value="'yes'"),
        policy.HINT_WRONG_TYPE.format(hint="idempotentHint", value="1"),
    ]
    assert [stored["vendor_extras"].open_world_hint, stored["transfer_funds"].open_world_hint] == [
        False,
        True,
    ]

    expected = TRUSTED_V1 if trust == AnnotationTrust.TRUST else dict.fromkeys(V1_NAMES, WORST)
    assert {name: axes(tool) for name, tool in stored.items()} == expected

    requested, succeeded = events(server, AuditAction.MCP_SYNC_REQUESTED, AuditAction.MCP_SYNC_SUCCEEDED)
    assert (requested.action, requested.actor, requested.details) == (
        AuditAction.MCP_SYNC_REQUESTED,
        operator,
        {"run_id": run.pk},
    )
    assert (succeeded.action, succeeded.level, succeeded.actor_label, succeeded.channel) == (
        AuditAction.MCP_SYNC_SUCCEEDED,
        AuditLevel.INFO,
        SYNC_ACTOR.label,
        Channel.TASK,
    )
    assert succeeded.details == {
        "run_id": run.pk,
        "attempt": 1,
        "trust": trust,
        "tools_seen": 9,
        "tools_added": 9,
        "tools_changed": 0,
        "tools_absent": 0,
        "added": V1_NAMES,
        "changed": [],
        "absent": [],
        "held_for_review": [],
    }


def test_fetch_returns_each_tool_as_sent_where_the_sdk_models_would_rewrite_it(
    connect: Callable[..., McpServer],
) -> None:
    listing = fetch_tool_listing(connect(HTTP, "catalog"))

    assert listing == catalog.listing()
    # Why the sync reads below the SDK's typed layer: its models read "yes" as true (a
    # read-only claim under TRUST) and drop the fields they do not know.
    typed = types.ListToolsResult.model_validate({"tools": listing})
    sloppy, vendor = typed.tools[-2].annotations, typed.tools[-1].annotations
    assert sloppy is not None
    assert vendor is not None
    assert sloppy.read_only_hint is True
    assert "x-vendor-risk" not in vendor.model_dump(by_alias=True)


@both_transports
def test_sync_follows_the_cursor_through_every_page(
    connect: Callable[..., McpServer], sync: Callable[..., McpSyncRun], transport: str
) -> None:
    server = connect(transport, "paginated", trust=AnnotationTrust.TRUST, tools=25, page_size=10)
    run = sync(server)

    assert (run.status, run.tools_seen, run.tools_added) == (SyncStatus.SUCCEEDED, 25, 25)
    stored = tools_of(server)
    assert sorted(stored) == [paginated.tool_name(i) for i in range(25)]
    assert stored["tool_0024"].claims == paginated.tool_definition(24)["annotations"]
    assert axes(stored["tool_0020"]) == ("READ_ONLY", "NON_DESTRUCTIVE", "IDEMPOTENT")
    assert axes(stored["tool_0024"]) == ("MUTATING", "DESTRUCTIVE", "NON_IDEMPOTENT")


def test_fetch_reports_progress_page_by_page(connect: Callable[..., McpServer]) -> None:
    seen: list[str] = []
    listing = fetch_tool_listing(connect(HTTP, "paginated", tools=25, page_size=10), on_progress=seen.append)

    assert len(listing) == 25
    assert seen[-1] == counted(PROGRESS_LISTED, 25, page=3)


def test_fetch_stops_at_its_caps_on_pages_and_tools(connect: Callable[..., McpServer]) -> None:
    with pytest.raises(SyncError) as pages:
        fetch_tool_listing(connect(HTTP, "misbehaving", mode="endless"), max_pages=5)
    with pytest.raises(SyncError) as many:
        fetch_tool_listing(connect(HTTP, "paginated", tools=25, page_size=10), max_tools=20)

    assert pages.value.message == ERROR_TOO_MANY_PAGES.format(limit=5)
    assert many.value.message == ERROR_TOO_MANY_TOOLS.format(limit=20)


# --- later syncs: absent tools, drift -----------------------------------------------------------


@both_transports
def test_a_later_sync_marks_vanished_tools_absent_and_holds_less_risky_drift_for_review(
    connect: Callable[..., McpServer], sync: Callable[..., McpSyncRun], transport: str, variant_file: Path
) -> None:
    server = connect(transport, "catalog", trust=AnnotationTrust.TRUST, variant_file=variant_file)
    sync(server)
    bare = tools_of(server)["bare_tool"]

    variant_file.write_text("v2")  # the server's definitions drift (see catalog._v2)
    run = sync(server)

    assert (run.status, run.tools_seen, run.tools_added, run.tools_changed, run.tools_absent) == (
        SyncStatus.SUCCEEDED,
        9,
        1,
        3,
        1,
    )
    bare.refresh_from_db()  # marked absent, never deleted; its last claims kept
    assert (bare.present, bare.claims) == (False, None)
    assert bare.absent_since is not None
    stored = tools_of(server)
    assert stored["archive_record"].present
    delete, note, lookup = stored["delete_record"], stored["append_note"], stored["lookup_record"]
    # T15: destructive -> non-destructive claims less risk: resolved as IGNORE until accepted.
    assert (delete.awaiting_review, axes(delete)) == (True, WORST)
    assert (delete.claims["destructiveHint"], delete.accepted_claims["destructiveHint"]) == (False, True)
    # Non-destructive -> destructive claims more: in force at once.
    assert (note.awaiting_review, axes(note)) == (False, ("MUTATING", "DESTRUCTIVE", "NON_IDEMPOTENT"))
    # A new description alone claims nothing new.
    assert (lookup.awaiting_review, axes(lookup)) == (False, TRUSTED_V1["lookup_record"])

    changed = {e.details["tool"]: e for e in events(server, AuditAction.TOOL_DEFINITION_CHANGED)}
    assert sorted(changed) == ["append_note", "delete_record", "lookup_record"]
    held = changed["delete_record"]
    assert (held.level, held.details["held_for_review"], held.details["claims_less_risk"]) == (
        AuditLevel.WARNING,
        True,
        ["destructiveHint"],
    )
    assert (
        held.details["claims_before"]["destructiveHint"],
        held.details["claims_after"]["destructiveHint"],
    ) == (
        True,
        False,
    )
    assert changed["append_note"].level == AuditLevel.INFO
    last = events(server, AuditAction.MCP_SYNC_SUCCEEDED)[-1]
    assert {key: last.details[key] for key in ("added", "changed", "absent", "held_for_review")} == {
        "added": ["archive_record"],
        "changed": ["append_note", "delete_record", "lookup_record"],
        "absent": ["bare_tool"],
        "held_for_review": ["delete_record"],
    }


# --- failures leave the stored tools alone ------------------------------------------------------

FailureCase = tuple[str, dict[str, Any], set[str]]


def _stdio_failures() -> dict[str, Callable[[], FailureCase]]:
    exit_detail = DETAIL_STDERR.format(tail=misbehaving.EXIT_MESSAGE)
    garbage = DETAIL_NOT_JSON_RPC.format(sample=repr(misbehaving.GARBAGE_LINE))
    return {
        "command-not-found": lambda: (
            "",
            {"command": "/nonexistent/aimon-mcp-server"},
            {ERROR_COMMAND_NOT_FOUND.format(command="/nonexistent/aimon-mcp-server")},
        ),
        "exits-at-once": lambda: (
            "misbehaving",
            {"mode": "exit"},
            {ERROR_CLOSED.format(stage=STAGE_INITIALIZE, detail=exit_detail)},
        ),
        # The interpreter takes about a second to start, so the 2 s may run out before or after
        # the handshake; either way the message names the timeout and where it struck.
        "hangs": lambda: (
            "hanging",
            {"timeout": 2},
            {
                ERROR_TIMED_OUT.format(seconds=2, stage=STAGE_PAGE.format(page=1), detail=""),
                ERROR_TIMED_OUT.format(seconds=2, stage=STAGE_INITIALIZE, detail=""),
            },
        ),
        "writes-garbage": lambda: (
            "misbehaving",
            {"mode": "garbage", "timeout": 2},
            {ERROR_TIMED_OUT.format(seconds=2, stage=STAGE_INITIALIZE, detail=garbage)},
        ),
        "dies-on-page-2": lambda: (
            "misbehaving",
            {"mode": "exit-on-page-2"},
            {ERROR_CLOSED.format(stage=STAGE_PAGE.format(page=2), detail="")},
        ),
    }


def _http_failures() -> dict[str, Callable[[], FailureCase]]:
    page = STAGE_PAGE.format
    return {
        "hangs": lambda: (
            "hanging",
            {"timeout": 1},
            {ERROR_TIMED_OUT.format(seconds=1, stage=page(page=1), detail="")},
        ),
        "hangs-before-initialize": lambda: (
            "hanging",
            {"stage": "initialize", "timeout": 1},
            {ERROR_TIMED_OUT.format(seconds=1, stage=STAGE_INITIALIZE, detail="")},
        ),
        "answers-an-error": lambda: (
            "misbehaving",
            {"mode": "error"},
            {
                ERROR_SERVER_ERROR.format(
                    code=types.INTERNAL_ERROR,
                    stage=page(page=1),
                    message=misbehaving.ERROR_MESSAGE,
                    detail="",
                )
            },
        ),
        "tools-not-a-list": lambda: (
            "misbehaving",
            {"mode": "not-a-list"},
            {ERROR_PROTOCOL.format(stage=page(page=1), detail='"tools" is not a list')},
        ),
        "nameless-tool": lambda: (
            "misbehaving",
            {"mode": "nameless"},
            {ERROR_PROTOCOL.format(stage=page(page=1), detail="tool 1 has no name")},
        ),
        "same-name-twice": lambda: (
            "misbehaving",
            {"mode": "duplicate"},
            {ERROR_PROTOCOL.format(stage=page(page=2), detail="tool 'twice' listed again (first on page 1)")},
        ),
        "cursor-loop": lambda: (
            "misbehaving",
            {"mode": "cursor-loop"},
            {ERROR_PROTOCOL.format(stage=page(page=2), detail="cursor 'same-again' handed out twice")},
        ),
        "fails-on-page-2": lambda: (
            "misbehaving",
            {"mode": "fail-on-page-2"},
            {
                ERROR_SERVER_ERROR.format(
                    code=types.INTERNAL_ERROR,
                    stage=page(page=2),
                    message=misbehaving.ERROR_MESSAGE,
                    detail="",
                )
            },
        ),
    }


STDIO_FAILURES, HTTP_FAILURES = _stdio_failures(), _http_failures()


def assert_failed_and_untouched(
    server: McpServer, run: McpSyncRun, before: list[dict[str, Any]], messages: set[str]
) -> None:
    assert run.status == SyncStatus.FAILED
    assert run.error in messages
    assert (run.progress, run.attempts, run.tools_seen) == (PROGRESS_FAILED, 1, 0)
    assert run.finished_at is not None
    assert tool_rows(server) == before
    (failed,) = events(server, AuditAction.MCP_SYNC_FAILED)
    assert (failed.level, failed.actor_label) == (AuditLevel.WARNING, SYNC_ACTOR.label)
    assert failed.details == {"run_id": run.pk, "attempt": 1, "error": run.error}
    assert not events(server, AuditAction.MCP_SYNC_SUCCEEDED, AuditAction.TOOL_DEFINITION_CHANGED)


@pytest.mark.parametrize("case", list(STDIO_FAILURES))
def test_a_failing_stdio_server_fails_the_run_with_a_clear_message_and_leaves_tools_alone(
    connect: Callable[..., McpServer],
    make_server: Callable[..., McpServer],
    sync: Callable[..., McpSyncRun],
    case: str,
) -> None:
    module, options, messages = STDIO_FAILURES[case]()
    server = connect(STDIO, module, **options) if module else make_server(STDIO, **options)
    before = store_earlier_sync(server)

    assert_failed_and_untouched(server, sync(server), before, messages)


@pytest.mark.parametrize("case", list(HTTP_FAILURES))
def test_a_failing_http_server_fails_the_run_with_a_clear_message_and_leaves_tools_alone(
    connect: Callable[..., McpServer], sync: Callable[..., McpSyncRun], case: str
) -> None:
    module, options, messages = HTTP_FAILURES[case]()
    server = connect(HTTP, module, **options)
    before = store_earlier_sync(server)

    assert_failed_and_untouched(server, sync(server), before, messages)


def test_an_http_server_nobody_listens_on_is_unreachable(
    make_server: Callable[..., McpServer], sync: Callable[..., McpSyncRun]
) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    server = make_server(HTTP, url=url)
    before = store_earlier_sync(server)
    run = sync(server)

    assert run.error.startswith(ERROR_UNREACHABLE.split("{reason}")[0].format(url=url))
    assert_failed_and_untouched(server, run, before, {run.error})


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (404, types.METHOD_NOT_FOUND, "Not Found"),
        (401, types.INTERNAL_ERROR, "Server returned an error response"),
    ],
)
def test_a_web_server_that_is_not_mcp_fails_the_handshake(
    make_server: Callable[..., McpServer],
    sync: Callable[..., McpSyncRun],
    status: int,
    code: int,
    message: str,
) -> None:
    with serve_asgi(not_mcp_app(status)) as url:
        server = make_server(HTTP, url=url)
        before = store_earlier_sync(server)
        run = sync(server)

    detail = DETAIL_HTTP_STATUS.format(status=status)
    expected = ERROR_SERVER_ERROR.format(code=code, stage=STAGE_INITIALIZE, message=message, detail=detail)
    assert_failed_and_untouched(server, run, before, {expected})


def test_a_failure_message_never_carries_the_servers_secrets(
    connect: Callable[..., McpServer], sync: Callable[..., McpSyncRun]
) -> None:
    server = connect(STDIO, "misbehaving", env={"API_TOKEN": "tok-8f2a1c"}, mode="leak-secret")
    run = sync(server)

    tail = misbehaving.LEAK_MESSAGE.format(token="[secret]")
    assert run.error == ERROR_CLOSED.format(stage=STAGE_INITIALIZE, detail=DETAIL_STDERR.format(tail=tail))
    (failed,) = events(server, AuditAction.MCP_SYNC_FAILED)
    assert "tok-8f2a1c" not in str(failed.details)


def test_a_disabled_server_is_not_contacted(
    make_server: Callable[..., McpServer], sync: Callable[..., McpSyncRun]
) -> None:
    server = make_server(STDIO, command="/nonexistent/aimon-mcp-server", enabled=False)
    before = store_earlier_sync(server)

    assert_failed_and_untouched(server, sync(server), before, {ERROR_DISABLED})


def test_past_the_soft_time_limit_the_run_fails_and_the_fetch_stops(
    connect: Callable[..., McpServer], sync: Callable[..., McpSyncRun]
) -> None:
    listing_started = threading.Event()
    server = connect(HTTP, "hanging", timeout=60, listing_started=listing_started)
    before = store_earlier_sync(server)

    def pool_signals_soft_limit() -> None:
        # What a Celery pool does to a task past its soft limit: SIGUSR1, whose handler raises.
        if listing_started.wait(30):
            os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, soft_timeout_sighandler)
    pool = threading.Thread(target=pool_signals_soft_limit, daemon=True)
    started = time.monotonic()
    try:
        pool.start()
        run = sync(server)
    finally:
        pool.join(30)
        signal.signal(signal.SIGUSR1, previous)

    assert time.monotonic() - started < 10  # not the server's 60 s timeout
    assert_failed_and_untouched(server, run, before, {ERROR_TIME_LIMIT})


# --- delivery: twice, after a dead worker, while another holds the run -------------------------


def test_delivering_the_task_again_for_a_finished_run_writes_nothing(
    connect: Callable[..., McpServer], sync: Callable[..., McpSyncRun]
) -> None:
    server = connect(HTTP, "catalog")
    run = sync(server)
    rows, audit = tool_rows(server), AuditEvent.objects.count()

    assert sync_mcp_server.apply(args=[run.pk]).get() is None

    again = McpSyncRun.objects.get(pk=run.pk)
    assert (again.status, again.attempts, again.finished_at) == (SyncStatus.SUCCEEDED, 1, run.finished_at)
    assert tool_rows(server) == rows
    assert AuditEvent.objects.count() == audit


def test_a_redelivery_after_the_worker_died_mid_sync_finishes_the_run(
    connect: Callable[..., McpServer], operator_actor: Actor
) -> None:
    server = connect(HTTP, "catalog")
    run = mcp_sync_request(server=server, actor=operator_actor)  # not committed: no task yet
    # What a worker killed half-way leaves behind (its lock, if any, died with its connection).
    McpSyncRun.objects.filter(pk=run.pk).update(
        status=SyncStatus.RUNNING,
        attempts=1,
        started_at=timezone.now(),
        progress=counted(PROGRESS_LISTED, 3, page=1),
    )

    assert sync_mcp_server.apply(args=[run.pk]).get() == SyncStatus.SUCCEEDED

    run.refresh_from_db()
    assert (run.status, run.attempts, run.tools_added) == (SyncStatus.SUCCEEDED, 2, 9)
    (succeeded,) = events(server, AuditAction.MCP_SYNC_SUCCEEDED)
    assert succeeded.details["attempt"] == 2


def test_a_run_whose_workers_keep_dying_is_given_up(
    make_server: Callable[..., McpServer], operator_actor: Actor
) -> None:
    server = make_server(STDIO, command="/nonexistent/aimon-mcp-server")
    run = mcp_sync_request(server=server, actor=operator_actor)
    McpSyncRun.objects.filter(pk=run.pk).update(status=SyncStatus.RUNNING, attempts=MAX_ATTEMPTS)

    assert sync_mcp_server.apply(args=[run.pk]).get() is None

    run.refresh_from_db()
    assert (run.status, run.error, run.attempts) == (
        SyncStatus.FAILED,
        ERROR_GAVE_UP.format(attempts=MAX_ATTEMPTS),
        MAX_ATTEMPTS,
    )
    assert [e.details["error"] for e in events(server, AuditAction.MCP_SYNC_FAILED)] == [run.error]


def test_stale_running_runs_are_failed_and_recent_ones_left_alone(
    make_server: Callable[..., McpServer], operator_actor: Actor
) -> None:
    stale_server, busy_server = (
        make_server(HTTP, url="http://127.0.0.1:9/mcp"),
        make_server(HTTP, url="http://127.0.0.1:9/mcp"),
    )
    stale = mcp_sync_request(server=stale_server, actor=operator_actor)
    busy = mcp_sync_request(server=busy_server, actor=operator_actor)
    McpSyncRun.objects.filter(pk=stale.pk).update(
        status=SyncStatus.RUNNING, attempts=1, started_at=timezone.now() - dt.timedelta(hours=2)
    )
    McpSyncRun.objects.filter(pk=busy.pk).update(
        status=SyncStatus.RUNNING, attempts=1, started_at=timezone.now()
    )

    assert sync_runs_fail_stale() == 1

    stale.refresh_from_db()
    busy.refresh_from_db()
    assert (stale.status, stale.error) == (SyncStatus.FAILED, ERROR_STALE)
    assert busy.status == SyncStatus.RUNNING
    assert [e.details["error"] for e in events(stale_server, AuditAction.MCP_SYNC_FAILED)] == [ERROR_STALE]


def test_a_second_request_while_a_sync_is_active_is_refused(
    connect: Callable[..., McpServer], sync: Callable[..., McpSyncRun], operator_actor: Actor
) -> None:
    server = connect(HTTP, "catalog")
    queued = mcp_sync_request(server=server, actor=operator_actor)  # queued; its task not started

    with pytest.raises(RegistryError, match=SYNC_ALREADY_ACTIVE):
        mcp_sync_request(server=server, actor=operator_actor)

    assert McpSyncRun.objects.filter(server=server).count() == 1
    assert sync_mcp_server.apply(args=[queued.pk]).get() == SyncStatus.SUCCEEDED
    assert sync(server).status == SyncStatus.SUCCEEDED  # once it finished, a new one is fine


def _lock_connection() -> psycopg.Connection:
    """A second PostgreSQL session, as another worker's would be."""
    settings = connection.settings_dict
    return psycopg.connect(
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        dbname=settings["NAME"],
        autocommit=True,
    )


def _wait_until_released(namespace: int, key: int) -> None:
    """Until no session holds the advisory lock (namespace, key): a test's bound, 10 s."""
    deadline = time.monotonic() + 10
    with connection.cursor() as cursor:
        while True:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
                "AND objid = %s AND objsubid = 2",
                [namespace, key],
            )
            if cursor.fetchone()[0] == 0:
                return
            assert time.monotonic() < deadline, "the closed session's lock was never released"
            time.sleep(0.02)


@pytest.mark.postgres
def test_a_duplicate_delivery_while_another_worker_holds_the_run_does_nothing(
    connect: Callable[..., McpServer], operator_actor: Actor
) -> None:
    server = connect(HTTP, "catalog")
    run = mcp_sync_request(server=server, actor=operator_actor)
    McpSyncRun.objects.filter(pk=run.pk).update(
        status=SyncStatus.RUNNING, attempts=1, started_at=timezone.now()
    )
    with _lock_connection() as other_worker:
        other_worker.execute("SELECT pg_advisory_lock(%s, %s)", [RUN_LOCK_NAMESPACE, run.pk])

        assert sync_mcp_server.apply(args=[run.pk]).get() is None
        run.refresh_from_db()
        assert (run.status, run.attempts) == (SyncStatus.RUNNING, 1)
        assert not Tool.objects.filter(server=server).exists()

    # Its session gone (the worker died), the next delivery finishes the run. Closing a
    # connection does not wait for PostgreSQL to end its session: the lock is free only once
    # the server has (without this wait, the next delivery could still find it held).
    _wait_until_released(RUN_LOCK_NAMESPACE, run.pk)
    assert sync_mcp_server.apply(args=[run.pk]).get() == SyncStatus.SUCCEEDED
    run.refresh_from_db()
    assert (run.status, run.attempts) == (SyncStatus.SUCCEEDED, 2)


# A Celery worker process running one delivery of the sync task against the test database.
WORKER = (
    "import django; django.setup(); from aimon_admin.registry import tasks; tasks.sync_mcp_server({run_id})"
)


def worker_env() -> dict[str, str]:
    db = connection.settings_dict
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "aimon_admin.settings.test",
        "DATABASE_URL": f"postgres://{db['USER']}@{host}:{port}/{db['NAME']}",
        "CELERY_TASK_ALWAYS_EAGER": "1",
    }


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_sync_is_redelivered_and_the_retry_completes(
    connect: Callable[..., McpServer], operator_actor: Actor, variant_file: Path
) -> None:
    server = connect(STDIO, "catalog", variant_file=variant_file)
    variant_file.write_text(catalog.SLOW)
    # A queued run whose message a worker process picks up (mcp_sync_request would run the
    # eager task right here, on commit).
    run = McpSyncRun.objects.create(server=server, requested_by=operator_actor.user, progress="Queued")
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER.format(run_id=run.pk)], cwd=ROOT, env=worker_env()
    )
    try:
        deadline = time.monotonic() + 30
        while McpSyncRun.objects.get(pk=run.pk).status != SyncStatus.RUNNING:
            assert time.monotonic() < deadline, "the worker never started the sync"
            assert worker.poll() is None, (
                f"the worker exited early: {McpSyncRun.objects.get(pk=run.pk).error}"
            )
            time.sleep(0.1)
        time.sleep(1)  # well into the sync: starting the server, or waiting on its listing
    finally:
        worker.kill()
        worker.wait(10)
    assert McpSyncRun.objects.get(pk=run.pk).status == SyncStatus.RUNNING

    variant_file.write_text("v1")
    deadline = time.monotonic() + 10
    while (outcome := sync_mcp_server.apply(args=[run.pk]).get()) is None:  # until PostgreSQL drops its lock
        assert time.monotonic() < deadline, "the dead worker's lock was never released"
        time.sleep(0.2)

    run.refresh_from_db()
    assert (outcome, run.status, run.attempts, run.tools_added) == (
        SyncStatus.SUCCEEDED,
        SyncStatus.SUCCEEDED,
        2,
        9,
    )
    assert [e.details["attempt"] for e in events(server, AuditAction.MCP_SYNC_SUCCEEDED)] == [2]


def test_each_finished_sync_is_counted_by_its_outcome_in_the_metrics(
    connect: Callable[..., McpServer],
    sync: Callable[..., McpSyncRun],
    make_server: Callable[..., McpServer],
) -> None:
    before = scrape()
    assert sync(connect(STDIO, "catalog")).status == SyncStatus.SUCCEEDED
    disabled = make_server(STDIO, command="/nonexistent/aimon-mcp-server", enabled=False)
    assert sync(disabled).status == SyncStatus.FAILED
    after = scrape()
    assert moved(before, after, "aimon_mcp_sync_runs_total", outcome="SUCCEEDED") == 1
    assert moved(before, after, "aimon_mcp_sync_runs_total", outcome="FAILED") == 1
