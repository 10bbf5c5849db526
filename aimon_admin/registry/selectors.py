"""Reads for the registry: what a runtime's model may see, and what the gate decides."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.db.models import F, Max, Q, QuerySet

from aimon_admin.registry import policy
from aimon_admin.registry.choices import (
    DestructiveBehavior,
    IdempotencyBehavior,
    RelayFindingStatus,
    SideEffectLevel,
    SubjectKind,
    ToolSource,
)
from aimon_admin.registry.models import McpServer, RelayFinding, Tool, ToolSubject
from aimon_admin.runtimes.models import AgentRuntime


def tools_available_to(*, runtime: AgentRuntime) -> QuerySet[Tool]:
    """A runtime's present local tools plus the present tools of every enabled MCP server."""
    return (
        Tool.objects.filter(present=True)
        .filter(Q(source=ToolSource.LOCAL, runtime=runtime) | Q(source=ToolSource.MCP, server__enabled=True))
        .select_related("server")
        .order_by("source", "server__name", "name")
    )


def runtime_default_for_gate(*, remembered: str | None) -> AgentRuntime | None:
    """The runtime the gate simulator and worklist open on: the one this user chose there
    last (`remembered`), while it is enabled; else the enabled runtime whose token was used
    most recently (the one doing work now, so the one worth simulating); else the first
    enabled one by name. Never a disabled or retired runtime; None if every one is."""
    enabled = AgentRuntime.objects.filter(is_active=True)
    if remembered:
        chosen = enabled.filter(name=remembered).first()
        if chosen is not None:
            return chosen
    return (
        enabled.annotate(last_used=Max("tokens__last_used_at"))
        .order_by(F("last_used").desc(nulls_last=True), "name")
        .first()
    )


def tools_for_model(*, runtime: AgentRuntime) -> QuerySet[Tool]:
    """T6: the tool definitions the runtime may give its model: those its ceiling permits."""
    permitted = [level for level in SideEffectLevel if policy.permits(runtime.ceiling, level)]  # T1
    return tools_available_to(runtime=runtime).filter(side_effect_level__in=permitted)


def tool_lookup(*, runtime: AgentRuntime, name: str, server: str | None) -> Tool | None:
    """The registered tool a decision is about, or None (then T9: MUTATING + DESTRUCTIVE)."""
    if server is None:
        return Tool.objects.filter(source=ToolSource.LOCAL, runtime=runtime, name=name, present=True).first()
    return Tool.objects.filter(
        source=ToolSource.MCP, server__name=server, server__enabled=True, name=name, present=True
    ).first()


# `tool_axes` as plain SQL. The sources are literals, not parameters, so SQLite can use the
# partial unique indexes (runtime, name) and (server, name) that cover one source each.
_LOCAL_AXES_SQL_FOR = (
    "SELECT side_effect_level, destructive_behavior, idempotency_behavior FROM registry_tool"
    " WHERE source = 'LOCAL' AND runtime_id = {runtime} AND name = %s AND present = %s"
)
_LOCAL_AXES_SQL = _LOCAL_AXES_SQL_FOR.format(runtime="%s")
_MCP_AXES_SQL = (
    "SELECT t.side_effect_level, t.destructive_behavior, t.idempotency_behavior FROM registry_tool t"
    " INNER JOIN registry_mcpserver s ON s.id = t.server_id"
    " WHERE t.source = 'MCP' AND s.name = %s AND s.enabled = %s AND t.name = %s AND t.present = %s"
)


def tool_axes(*, runtime: AgentRuntime, name: str, server: str | None) -> policy.ToolAxes | None:
    """The axes of the tool `tool_lookup` finds, or None: the same rows, one lean query.

    For the decision endpoint, which runs on every tool call: building the ORM query
    costs several times more than running it (benchmarks/tool_decisions.py), so this is
    plain SQL that reads three columns. Tests hold it to `tool_lookup`'s answers.
    """
    with connection.cursor() as cursor:
        if server is None:
            cursor.execute(_LOCAL_AXES_SQL, [runtime.pk, name, True])
        else:
            cursor.execute(_MCP_AXES_SQL, [server, True, name, True])
        row = cursor.fetchone()
    if row is None:
        return None
    return policy.ToolAxes(SideEffectLevel(row[0]), DestructiveBehavior(row[1]), IdempotencyBehavior(row[2]))


# Plain SQL for the same reason as `tool_axes`: it runs on every tool decision. One row at most
# (the unique index on server, tool answers it); the table holds one row per named subject.
_SUBJECT_SQL = f"SELECT argument, kind FROM {ToolSubject._meta.db_table} WHERE server = %s AND tool = %s"  # noqa: S608 # nosec B608


@dataclass(frozen=True)
class SubjectArgument:
    """U1: which argument of a tool is its call's subject ("": none named) and how it is read."""

    argument: str = ""
    kind: SubjectKind = SubjectKind.TEXT


def subject_argument_for(server: str | None, tool: str) -> SubjectArgument:
    """U1: the argument whose value is a call's subject for this tool (a local tool: `server`
    None or "") and its kind; no argument when the operator named none.

    Read on every tool decision, so one indexed lookup and no cache: a cache would need the
    same round trip to know it is fresh (a subject set on one node must count on the next
    decision of every node)."""
    with connection.cursor() as cursor:
        cursor.execute(_SUBJECT_SQL, [server or "", tool])
        row = cursor.fetchone()
    return subject_argument_of(row)


def subject_argument_of(row: tuple[str, str] | None) -> SubjectArgument:
    """A `tool_facts_query` subject row (or None: no row) as the subject argument. A kind this
    code does not know is read as a command: the strictest reading (fail closed)."""
    if row is None:
        return SubjectArgument()
    kind = row[1] if row[1] in SubjectKind.values else SubjectKind.COMMAND
    return SubjectArgument(row[0], SubjectKind(kind))


@dataclass(frozen=True)
class ToolFactsQuery:
    """The two reads `tool_axes` and `subject_argument_for` make, as SQL for a caller that
    runs them inside a statement of its own (approvals' tool decision, part U of docs/rules.md:
    one round trip per call). Each SELECT gives at most one row: `axes_sql` the tool's
    (side_effect_level, destructive_behavior, idempotency_behavior), `subject_sql` its
    (argument, kind); each with its parameters."""

    axes_sql: str
    axes_params: tuple[object, ...]
    subject_sql: str
    subject_params: tuple[object, ...]


def tool_facts_query(
    *, runtime_pk: int | None, name: str, server: str | None, runtime_sql: str = ""
) -> ToolFactsQuery:
    """`runtime_sql`: an SQL expression for the runtime in place of `runtime_pk` (a caller
    whose statement looks the runtime up itself; no input in it)."""
    if server is None and runtime_sql:
        axes_sql, axes_params = _LOCAL_AXES_SQL_FOR.format(runtime=runtime_sql), (name, True)
    elif server is None:
        axes_sql, axes_params = _LOCAL_AXES_SQL, (runtime_pk, name, True)
    else:
        axes_sql, axes_params = _MCP_AXES_SQL, (server, True, name, True)
    return ToolFactsQuery(axes_sql, axes_params, _SUBJECT_SQL, (server or "", name))


def tool_axes_of(row: tuple[str, str, str]) -> policy.ToolAxes:
    """A `tool_facts_query` axes row as the tool's axes."""
    return policy.ToolAxes(SideEffectLevel(row[0]), DestructiveBehavior(row[1]), IdempotencyBehavior(row[2]))


def tools_named(*, server: str | None, name: str, runtime: AgentRuntime | None = None) -> QuerySet[Tool]:
    """The present registrations a rule or subject for `server/name` names: an MCP tool on
    its enabled server; a runtime's own tool for `runtime`, or for every runtime that
    registered it when `runtime` is None. Empty when no one registered it (T9: then the
    tool counts as unregistered wherever it is called)."""
    tools = Tool.objects.filter(present=True, name=name).select_related("server", "runtime")
    if server:
        return tools.filter(source=ToolSource.MCP, server__name=server, server__enabled=True)
    tools = tools.filter(source=ToolSource.LOCAL)
    return tools.filter(runtime=runtime) if runtime is not None else tools.order_by("runtime__name")


def tool_subjects() -> QuerySet[ToolSubject]:
    """Every subject argument the operator has named, by server and tool."""
    return ToolSubject.objects.order_by("server", "tool")


def mcp_servers_enabled() -> QuerySet[McpServer]:
    return McpServer.objects.filter(enabled=True).order_by("name")


def relay_findings_open() -> QuerySet[RelayFinding]:
    """T15: relayed definitions that differ from the served ones, waiting for an operator."""
    return (
        RelayFinding.objects.filter(status=RelayFindingStatus.OPEN)
        .select_related("tool__server", "runtime")
        .order_by("-last_seen_at", "-id")
    )


def relay_findings_for_tool(*, tool: Tool) -> QuerySet[RelayFinding]:
    """Every relay finding on one tool, open ones first, newest first."""
    return (
        RelayFinding.objects.filter(tool=tool)
        .select_related("tool__server", "runtime", "closed_by")
        .order_by("-last_seen_at", "-id")
    )


def relay_finding_lowers(finding: RelayFinding) -> list[str]:
    """T15: the hints on which accepting `finding` would claim less risk than the tool's
    accepted definition (then it is held); none for a tool only relayed until now, which has
    no accepted definition: the operator's acceptance is its first."""
    tool = finding.tool
    if tool.relayed_only:
        return []
    return policy.claims_lowered_risk(tool.accepted_claims, finding.annotations)
