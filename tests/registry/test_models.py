"""Registry constraints (STYLE "Enums and constraints"): each named rule through
`full_clean()` and through raw SQL that bypasses Django."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from aimon_admin.registry.choices import (
    AnnotationTrust,
    DestructiveBehavior,
    IdempotencyBehavior,
    McpTransport,
    RelayFindingStatus,
    SideEffectLevel,
    SyncStatus,
    ToolSource,
)
from aimon_admin.registry.models import McpServer, McpSyncRun, RelayFinding, Tool, ToolSubject
from aimon_admin.runtimes.models import AgentRuntime

pytestmark = pytest.mark.django_db

FINGERPRINT = "f" * 64


# --- helpers ------------------------------------------------------------------------------------


def make_server(name: str = "files", **fields: Any) -> McpServer:
    values = {"transport": McpTransport.STDIO, "command": "mcp-files", **fields}
    return McpServer.objects.create(name=name, **values)


def tool_instance(**fields: Any) -> Tool:
    now = timezone.now()
    values: dict[str, Any] = {
        "name": "read_file",
        "fingerprint": FINGERPRINT,
        "side_effect_level": SideEffectLevel.MUTATING,
        "destructive_behavior": DestructiveBehavior.DESTRUCTIVE,
        "idempotency_behavior": IdempotencyBehavior.NON_IDEMPOTENT,
        "resolved_at": now,
        "last_seen_at": now,
        **fields,
    }
    return Tool(**values)


def local_tool(runtime: AgentRuntime, **fields: Any) -> Tool:
    return tool_instance(source=ToolSource.LOCAL, runtime=runtime, **fields)


def mcp_tool(server: McpServer, **fields: Any) -> Tool:
    return tool_instance(source=ToolSource.MCP, server=server, **fields)


def raw_update(obj: models.Model, **columns: Any) -> None:
    """UPDATE one row straight in SQL, past every Django check."""
    table = connection.ops.quote_name(obj._meta.db_table)
    sets = ", ".join(f"{connection.ops.quote_name(column)} = %s" for column in columns)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {sets} WHERE id = %s", [*columns.values(), obj.pk])


def raw_insert(obj: models.Model, **overrides: Any) -> None:
    """INSERT a copy of a saved row straight in SQL, with some columns overridden."""
    fields = [field for field in obj._meta.concrete_fields if not field.primary_key]
    unknown = set(overrides) - {field.column for field in fields}
    assert not unknown, unknown
    columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
    params = [
        overrides[field.column]
        if field.column in overrides
        else field.get_db_prep_save(getattr(obj, field.attname), connection)
        for field in fields
    ]
    placeholders = ", ".join(["%s"] * len(fields))
    table = connection.ops.quote_name(obj._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", params)


def assert_integrity_error(action: Callable[[], None], *constraints: str) -> None:
    """The statement fails, refused by one of `constraints` where the database names it
    (PostgreSQL always does; SQLite names CHECK constraints, not unique indexes)."""
    with pytest.raises(IntegrityError) as caught, transaction.atomic():
        action()
    message = str(caught.value)
    if connection.vendor == "postgresql" or "CHECK constraint" in message:
        assert any(f"{name}" in message for name in constraints), message


def constraint_messages(obj: models.Model) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        obj.validate_constraints()
    return caught.value.messages


# --- enums: the field refuses in full_clean(), the named CHECK in validate_constraints() and SQL --

ENUM_CASES = [
    # model, column, bad value, constraint, message
    ("server", "transport", "SSE", "mcp_server_transport_valid", "Unknown transport."),
    ("server", "annotation_trust", "MAYBE", "mcp_server_trust_valid", "Unknown annotation trust."),
    ("tool", "source", "PLUGIN", "tool_source_valid", "Unknown tool source."),
    ("tool", "side_effect_level", "WRITE", "tool_level_valid", "Unknown side-effect level."),
    ("tool", "destructive_behavior", "SOMETIMES", "tool_destructive_valid", "Unknown destructive behavior."),
    ("tool", "idempotency_behavior", "ONCE", "tool_idempotency_valid", "Unknown idempotency behavior."),
    ("sync", "status", "PAUSED", "mcp_sync_status_valid", "Unknown sync status."),
]


def _saved(kind: str, runtime: AgentRuntime) -> models.Model:
    if kind == "server":
        return make_server()
    if kind == "tool":
        tool = local_tool(runtime)
        tool.save()
        return tool
    return McpSyncRun.objects.create(server=make_server())


@pytest.mark.parametrize(
    ("kind", "column", "value", "constraint", "message"), ENUM_CASES, ids=[case[3] for case in ENUM_CASES]
)
def test_enum_columns_refuse_unknown_values(
    runtime: AgentRuntime, kind: str, column: str, value: str, constraint: str, message: str
) -> None:  # T1-T3, T13 (enums and constraints)
    obj = _saved(kind, runtime)
    obj.full_clean()  # the saved row is valid, so the failures below are the bad value's

    setattr(obj, column, value)
    with pytest.raises(ValidationError) as caught:
        obj.full_clean()
    assert list(caught.value.message_dict) == [column]
    assert message in constraint_messages(obj)

    obj.refresh_from_db()
    # An unknown source also breaks tool_owner_matches_source; PostgreSQL may name either.
    also = ("tool_owner_matches_source",) if column == "source" else ()
    assert_integrity_error(lambda: raw_update(obj, **{column: value}), constraint, *also)


@pytest.mark.parametrize(
    ("kind", "column", "values"),
    [
        ("server", "transport", McpTransport.values),
        ("server", "annotation_trust", AnnotationTrust.values),
        ("tool", "side_effect_level", [SideEffectLevel.MUTATING]),
        ("tool", "destructive_behavior", DestructiveBehavior.values),
        ("tool", "idempotency_behavior", IdempotencyBehavior.values),
        ("sync", "status", SyncStatus.values),
    ],
)
def test_enum_columns_accept_every_known_value(
    runtime: AgentRuntime, kind: str, column: str, values: list[str]
) -> None:
    # T1-T3, T13: the checks refuse only what is unknown.
    obj = _saved(kind, runtime)
    for value in values:
        with transaction.atomic():
            raw_update(obj, **{column: value})
        if column == "transport":
            raw_update(obj, url="https://mcp.example.com/")  # so HTTP also has what it needs
        obj.refresh_from_db()
        obj.full_clean()


@pytest.mark.parametrize("model", [McpServer, McpSyncRun, Tool, ToolSubject])
def test_every_named_constraint_exists_in_the_database(model: type[models.Model]) -> None:
    # The raw statements below can only be refused by constraints the database really has.
    # STYLE "Enums and constraints": named DB constraints, present on both databases.
    with connection.cursor() as cursor:
        in_database = set(connection.introspection.get_constraints(cursor, model._meta.db_table))
    declared = {constraint.name for constraint in model._meta.constraints}
    assert declared
    assert declared <= in_database


def test_a_new_server_ignores_annotations_by_default() -> None:  # T13
    assert make_server().annotation_trust == AnnotationTrust.IGNORE


def test_read_only_is_not_stored_on_its_own(runtime: AgentRuntime) -> None:  # T4
    with pytest.raises(FieldDoesNotExist):
        Tool._meta.get_field("read_only")
    tool = local_tool(
        runtime, side_effect_level=SideEffectLevel.READ_ONLY, destructive_behavior="NON_DESTRUCTIVE"
    )
    assert tool.read_only is True


# --- Tool: owner matches source ----------------------------------------------------------------

OWNER_MESSAGE = "A local tool belongs to a runtime, an MCP tool to its server, never both."


@pytest.mark.parametrize(
    ("source", "has_runtime", "has_server", "valid"),
    [
        (ToolSource.LOCAL, True, False, True),
        (ToolSource.MCP, False, True, True),
        (ToolSource.LOCAL, False, True, False),
        (ToolSource.LOCAL, True, True, False),
        (ToolSource.LOCAL, False, False, False),
        (ToolSource.MCP, True, False, False),
        (ToolSource.MCP, True, True, False),
        (ToolSource.MCP, False, False, False),
    ],
)
def test_tool_owner_matches_source(
    runtime: AgentRuntime, source: str, has_runtime: bool, has_server: bool, valid: bool
) -> None:
    # T12: a local tool belongs to its runtime, an MCP tool to its server.
    server = make_server()
    tool = tool_instance(
        source=source, runtime=runtime if has_runtime else None, server=server if has_server else None
    )
    if valid:
        tool.full_clean()
        tool.save()
        return
    with pytest.raises(ValidationError) as caught:
        tool.full_clean()
    assert caught.value.messages == [OWNER_MESSAGE]

    # Raw: a valid row of the same source, then its owners changed behind Django's back.
    good = local_tool(runtime) if source == ToolSource.LOCAL else mcp_tool(server)
    good.save()
    assert_integrity_error(
        lambda: raw_update(
            good,
            runtime_id=runtime.pk if has_runtime else None,
            server_id=server.pk if has_server else None,
        ),
        "tool_owner_matches_source",
    )
    assert_integrity_error(
        lambda: raw_insert(
            good,
            name="raw",
            runtime_id=runtime.pk if has_runtime else None,
            server_id=server.pk if has_server else None,
        ),
        "tool_owner_matches_source",
    )


# --- Tool: read-only is non-destructive (T5) ---------------------------------------------------

T5_MESSAGE = (
    "A read-only tool is stored as non-destructive: a tool that changes nothing cannot destroy anything."
)


@pytest.mark.parametrize(
    ("level", "destructive", "valid"),
    [
        (SideEffectLevel.READ_ONLY, DestructiveBehavior.NON_DESTRUCTIVE, True),
        (SideEffectLevel.MUTATING, DestructiveBehavior.NON_DESTRUCTIVE, True),
        (SideEffectLevel.MUTATING, DestructiveBehavior.DESTRUCTIVE, True),
        (SideEffectLevel.READ_ONLY, DestructiveBehavior.DESTRUCTIVE, False),
    ],
)
def test_tool_read_only_is_non_destructive(
    runtime: AgentRuntime, level: str, destructive: str, valid: bool
) -> None:
    # T5
    tool = local_tool(runtime, side_effect_level=level, destructive_behavior=destructive)
    if valid:
        tool.full_clean()
        return
    with pytest.raises(ValidationError) as caught:
        tool.full_clean()
    assert caught.value.messages == [T5_MESSAGE]

    good = local_tool(runtime)
    good.save()
    assert_integrity_error(
        lambda: raw_update(good, side_effect_level=level, destructive_behavior=destructive),
        "tool_read_only_is_non_destructive",
    )
    assert_integrity_error(
        lambda: raw_insert(good, name="raw", side_effect_level=level, destructive_behavior=destructive),
        "tool_read_only_is_non_destructive",
    )


# --- Tool: unique names ------------------------------------------------------------------------


def test_a_local_tool_name_is_unique_per_runtime(runtime: AgentRuntime, other_runtime: AgentRuntime) -> None:
    # T9, T12: a name is one tool, so a decision finds one tool or none.
    local_tool(runtime, name="deploy").save()
    duplicate = local_tool(runtime, name="deploy")
    with pytest.raises(ValidationError) as caught:
        duplicate.full_clean()
    assert caught.value.messages == ["This runtime already has a tool of that name."]

    original = Tool.objects.get(runtime=runtime, name="deploy")
    assert_integrity_error(lambda: raw_insert(original), "tool_local_name_unique_per_runtime")

    # The same name on another runtime, or on an MCP server, is another tool.
    elsewhere = local_tool(other_runtime, name="deploy")
    elsewhere.full_clean()
    elsewhere.save()
    server_tool = mcp_tool(make_server(), name="deploy")
    server_tool.full_clean()
    with transaction.atomic():
        raw_insert(original, runtime_id=None, server_id=make_server("other").pk, source=ToolSource.MCP)
    assert Tool.objects.filter(name="deploy").count() == 3


def test_an_mcp_tool_name_is_unique_per_server(runtime: AgentRuntime) -> None:
    # T12, T15: drift is tracked per (server, name).
    server, other_server = make_server("files"), make_server("git")
    mcp_tool(server, name="read").save()
    duplicate = mcp_tool(server, name="read")
    with pytest.raises(ValidationError) as caught:
        duplicate.full_clean()
    assert caught.value.messages == ["This server already has a tool of that name."]

    original = Tool.objects.get(server=server, name="read")
    assert_integrity_error(lambda: raw_insert(original), "tool_mcp_name_unique_per_server")

    elsewhere = mcp_tool(other_server, name="read")
    elsewhere.full_clean()
    with transaction.atomic():
        raw_insert(original, server_id=other_server.pk)
    local = local_tool(runtime, name="read")
    local.full_clean()
    local.save()
    assert Tool.objects.filter(name="read").count() == 3


# --- McpServer: transport needs, timeout --------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "constraint", "message"),
    [
        (
            {"transport": McpTransport.STDIO, "command": "", "url": "https://mcp.example.com/"},
            "mcp_server_stdio_has_command",
            "A stdio server needs a command.",
        ),
        (
            {"transport": McpTransport.STREAMABLE_HTTP, "command": "mcp-files", "url": ""},
            "mcp_server_http_has_url",
            "A streamable HTTP server needs a URL.",
        ),
    ],
)
def test_a_transport_needs_its_endpoint(fields: dict[str, Any], constraint: str, message: str) -> None:
    # No T rule: MCP server settings (STYLE "Enums and constraints").
    server = McpServer(name="files", **fields)
    with pytest.raises(ValidationError) as caught:
        server.full_clean()
    assert caught.value.messages == [message]

    good = make_server(
        transport=McpTransport.STREAMABLE_HTTP, command="mcp-files", url="https://mcp.example.com/"
    )
    assert_integrity_error(lambda: raw_update(good, **fields), constraint)
    assert_integrity_error(lambda: raw_insert(good, name="raw", **fields), constraint)


@pytest.mark.parametrize(
    "fields",
    [
        {"transport": McpTransport.STDIO, "command": "mcp-files", "url": ""},
        {"transport": McpTransport.STREAMABLE_HTTP, "command": "", "url": "https://mcp.example.com/"},
    ],
)
def test_a_transport_with_its_endpoint_is_valid(fields: dict[str, Any]) -> None:
    # No T rule: MCP server settings (STYLE "Enums and constraints").
    server = McpServer(name="files", **fields)
    server.full_clean()
    server.save()


@pytest.mark.parametrize(("timeout", "valid"), [(0, False), (1, True), (30, True), (600, True), (601, False)])
def test_the_timeout_is_one_to_six_hundred_seconds(timeout: int, valid: bool) -> None:
    # No T rule: MCP server settings (STYLE "Enums and constraints").
    server = McpServer(
        name="files", transport=McpTransport.STDIO, command="mcp-files", timeout_seconds=timeout
    )
    if valid:
        server.full_clean()
        server.save()
        return
    with pytest.raises(ValidationError) as caught:
        server.full_clean()
    assert list(caught.value.message_dict) == ["timeout_seconds"]
    assert constraint_messages(server) == ["The timeout must be 1-600 seconds."]

    good = make_server()
    assert_integrity_error(lambda: raw_update(good, timeout_seconds=timeout), "mcp_server_timeout_range")
    assert_integrity_error(
        lambda: raw_insert(good, name="raw", timeout_seconds=timeout), "mcp_server_timeout_range"
    )


# --- McpSyncRun: one active sync per server -----------------------------------------------------

ACTIVE_MESSAGE = "A sync of this server is already queued or running."


@pytest.mark.parametrize("active", [SyncStatus.QUEUED, SyncStatus.RUNNING])
@pytest.mark.parametrize("second", [SyncStatus.QUEUED, SyncStatus.RUNNING])
def test_a_second_active_sync_of_a_server_is_refused(active: str, second: str) -> None:
    # T15 (the project's own sync): one active sync per server.
    server = make_server()
    first = McpSyncRun.objects.create(server=server, status=active)
    with pytest.raises(ValidationError) as caught:
        McpSyncRun(server=server, status=second).full_clean()
    assert caught.value.messages == [ACTIVE_MESSAGE]
    assert_integrity_error(lambda: raw_insert(first, status=second), "mcp_sync_one_active_per_server")

    # Turning a finished run back into an active one is refused too.
    done = McpSyncRun.objects.create(server=server, status=SyncStatus.SUCCEEDED)
    assert_integrity_error(lambda: raw_update(done, status=second), "mcp_sync_one_active_per_server")


@pytest.mark.parametrize("finished", [SyncStatus.SUCCEEDED, SyncStatus.FAILED])
def test_a_finished_sync_allows_a_new_one(finished: str) -> None:
    # T15 (the project's own sync): one active sync per server.
    server = make_server()
    first = McpSyncRun.objects.create(server=server, status=SyncStatus.RUNNING)
    first.status = finished
    first.save()
    second = McpSyncRun(server=server, status=SyncStatus.QUEUED)
    second.full_clean()
    second.save()
    with transaction.atomic():
        raw_insert(first, status=finished)  # any number of finished runs
    assert server.sync_runs.count() == 3


def test_active_syncs_of_different_servers_do_not_clash() -> None:
    # T15 (the project's own sync): one active sync per server.
    first = McpSyncRun.objects.create(server=make_server("files"), status=SyncStatus.RUNNING)
    other = McpSyncRun(server=make_server("git"), status=SyncStatus.QUEUED)
    other.full_clean()
    other.save()
    with transaction.atomic():
        raw_insert(first, server_id=make_server("web").pk)
    assert McpSyncRun.objects.filter(status__in=[SyncStatus.QUEUED, SyncStatus.RUNNING]).count() == 3


# --- Text limits ----------------------------------------------------------------------------------


def test_a_review_note_past_its_limit_is_refused_by_the_form_full_clean_and_the_database(
    runtime: AgentRuntime,
) -> None:
    from aimon_admin.registry.forms import ReviewForm
    from aimon_admin.registry.models import REVIEW_NOTE_MAX

    tool = _saved("tool", runtime)
    tool.review_note = "n" * REVIEW_NOTE_MAX
    tool.full_clean()
    tool.review_note += "n"
    assert f"A review note is at most {REVIEW_NOTE_MAX} characters." in constraint_messages(tool)
    assert_integrity_error(
        lambda: raw_update(tool, review_note="n" * (REVIEW_NOTE_MAX + 1)), "tool_review_note_length"
    )
    form = ReviewForm({"finding": "", "note": "n" * (REVIEW_NOTE_MAX + 1)})
    assert "note" in form.errors


# --- RelayFinding (T15): one open finding per (tool, runtime, definition) ---------------------


def relay_finding(tool: Tool, runtime: AgentRuntime, **fields: Any) -> RelayFinding:
    now = timezone.now()
    values: dict[str, Any] = {
        "description": "relayed",
        "fingerprint": FINGERPRINT,
        "first_seen_at": now,
        "last_seen_at": now,
        **fields,
    }
    return RelayFinding(tool=tool, runtime=runtime, **values)


def test_one_open_relay_finding_per_tool_runtime_and_definition(
    runtime: AgentRuntime, other_runtime: AgentRuntime
) -> None:  # T15
    tool = mcp_tool(make_server())
    tool.save()
    relay_finding(tool, runtime).save()
    duplicate = relay_finding(tool, runtime)
    with pytest.raises(ValidationError) as caught:
        duplicate.full_clean()
    assert caught.value.messages == ["This runtime's relayed definition is already an open finding."]
    original = RelayFinding.objects.get()
    assert_integrity_error(lambda: raw_insert(original), "relay_finding_one_open_per_definition")

    # Another runtime, another definition, or a closed finding is another row.
    relay_finding(tool, other_runtime).full_clean()
    relay_finding(tool, runtime, fingerprint="e" * 64).full_clean()
    closed = relay_finding(tool, runtime, status=RelayFindingStatus.DISMISSED, closed_at=timezone.now())
    closed.full_clean()
    with transaction.atomic():
        raw_insert(original, status=RelayFindingStatus.ACCEPTED, closed_at=timezone.now())
    assert RelayFinding.objects.count() == 2


def test_a_relay_finding_is_closed_exactly_when_it_has_a_closing_time(runtime: AgentRuntime) -> None:
    tool = mcp_tool(make_server())
    tool.save()
    finding = relay_finding(tool, runtime)
    finding.save()
    for status, closed_at in (
        (RelayFindingStatus.OPEN, timezone.now()),
        (RelayFindingStatus.DISMISSED, None),
    ):
        bad = relay_finding(tool, runtime, fingerprint="d" * 64, status=status, closed_at=closed_at)
        assert constraint_messages(bad) == ["An open finding has no closing time; a closed one has one."]
        assert_integrity_error(
            lambda s=status, c=closed_at: raw_update(finding, status=s, closed_at=c),
            "relay_finding_closed_at_iff_closed",
        )
    assert_integrity_error(
        lambda: raw_update(finding, status="MAYBE", closed_at=timezone.now()), "relay_finding_status_valid"
    )


# --- ToolSubject (U1) ----------------------------------------------------------------------------


def test_a_tool_has_one_subject_argument() -> None:
    # U1: one argument per tool, named by server and tool.
    original = ToolSubject.objects.create(server="", tool="Bash", argument="command")
    duplicate = ToolSubject(server="", tool="Bash", argument="cmd")
    with pytest.raises(ValidationError) as caught:
        duplicate.full_clean()
    assert caught.value.messages == ["This tool already has a subject argument."]
    assert_integrity_error(lambda: raw_insert(original, argument="cmd"), "tool_subject_one_per_tool")

    # The same tool name on an MCP server is another tool.
    elsewhere = ToolSubject(server="shell", tool="Bash", argument="cmd")
    elsewhere.full_clean()
    with transaction.atomic():
        raw_insert(original, server="shell")
    assert ToolSubject.objects.filter(tool="Bash").count() == 2


@pytest.mark.parametrize(("column", "value"), [("tool", ""), ("argument", "")])
def test_a_subject_names_its_tool_and_argument(column: str, value: str) -> None:
    row = ToolSubject.objects.create(server="", tool="Bash", argument="command")
    setattr(row, column, value)
    assert "A subject names its tool and the argument." in constraint_messages(row)
    row.refresh_from_db()
    assert_integrity_error(lambda: raw_update(row, **{column: value}), "tool_subject_names_both")
