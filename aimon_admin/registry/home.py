"""What the registry puts on the operators' home (core.home): the Registry section, with what
waits for review and what fails.

- Changed definitions awaiting review (T15): the partial index `tool_awaiting_review`
  holds exactly those tools, so the count reads only them.
- Open relay findings (T15): the (status, tool) index, counted up to 50.
- MCP syncs that failed or are stuck: each enabled server's latest run (one subquery per
  server through the run's server index; servers are few), judged by `sync.run_trouble`.
- Runtimes whose write tools would fail on unattended paths: the worklist's forecast
  (T8, U5) for every enabled runtime. It depends on every present tool's axes, so it is the
  one figure that reads the whole tool table: not tool by tool as the worklist does, but as
  counts per owner and combination of axes (one GROUP BY query for all runtimes, read from
  the small index `tool_present_owner_axes` alone, a dozen rows per owner at most), then the
  gate's rule per combination, then the operator's rules (one query for every runtime) for
  the few tools they name. And it is kept in the cache for FORECAST_SECONDS, so a busy home
  does not ask again on every load (a change shows within that time).

- MCP servers whose stored env, headers or URL no configured key decrypts (core.encryption):
  every server not retired is read and its three values decrypted (a few microseconds each;
  servers are few). Shown only when there is one: each fails its syncs until mended.

With no runtime at all the section says to create one first.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from django.core.cache import cache
from django.db import connection
from django.db.models import Count, OuterRef, Q, Subquery
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone

from aimon_admin.core.encryption import unreadable_rows
from aimon_admin.core.home import Figure, Line, Section, Step
from aimon_admin.core.plurals import counted
from aimon_admin.registry import extensions, policy
from aimon_admin.registry.choices import (
    DestructiveBehavior,
    IdempotencyBehavior,
    RelayFindingStatus,
    SideEffectLevel,
    ToolDecision,
    ToolSource,
)
from aimon_admin.registry.models import McpServer, McpSyncRun, RelayFinding, Tool
from aimon_admin.registry.sync import TROUBLE_STUCK, run_trouble
from aimon_admin.runtimes.models import AgentRuntime

PERMISSION = "registry.change_tool"
ORDER = 20
FINDINGS_LIMIT = 50
LINES_SHOWN = 5
FORECAST_SECONDS = 30
# The servers list's filter for the servers this section counts.
SYNC_FILTER = "attention"

# Words people see (tests import these).
TITLE = "Registry"
AWAITING_LABEL = ("changed definition awaiting review", "changed definitions awaiting review")
AWAITING_HELP = "A server's tool now claims less risk: its claims are ignored until you accept the change."
FINDINGS_LABEL = ("relay finding open", "relay findings open")
SYNCS_LABEL = ("MCP sync failed or stuck", "MCP syncs failed or stuck")
FORECAST_LABEL = (
    "runtime with write tools that would fail unattended",
    "runtimes with write tools that would fail unattended",
)
FORECAST_LINE = ("{runtime}: {count} write tool", "{runtime}: {count} write tools")
FORECAST_NOTE = "would fail unattended"
SYNC_STUCK_NOTE = "sync stuck: no worker is taking it"
FORECAST_HELP = (
    "With nobody to ask, the gate denies these tools' calls: review them, or add a pre-approval. "
    "Worked out again every half minute."
)
SECRETS_LABEL = (
    "MCP server whose stored secrets cannot be decrypted",
    "MCP servers whose stored secrets cannot be decrypted",
)
SECRETS_HELP = (
    "No configured key opens its env, headers or URL, so it is never synced: restore the key "
    "(AIMON_SECRETS_KEY), or enter them again on its Edit page."
)
SECRETS_NOTE = "stored secrets cannot be decrypted: not synced"
NO_RUNTIME = "No runtime yet: register the agents that will call AIMON first."
CREATE_RUNTIME = "Create a runtime"
ADD_SERVER = "Add an MCP server"


# --- MCP syncs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyncTrouble:
    server: McpServer
    run: McpSyncRun
    trouble: str  # sync.TROUBLE_FAILED or sync.TROUBLE_STUCK


def syncs_in_trouble(*, now: datetime | None = None) -> tuple[list[SyncTrouble], list[McpServer]]:
    """Enabled servers whose latest sync failed or is stuck, by name, and every server (its
    name and whether it is enabled; two queries)."""
    now = now or timezone.now()
    latest = McpSyncRun.objects.filter(server=OuterRef("pk")).order_by("-created_at", "-id")
    servers = list(
        McpServer.objects.only("pk", "name", "enabled")
        .annotate(last_run_id=Subquery(latest.values("pk")[:1]))
        .order_by("name")
    )
    synced = [server for server in servers if server.enabled and server.last_run_id is not None]
    runs = McpSyncRun.objects.in_bulk([server.last_run_id for server in synced]) if synced else {}
    found = []
    for server in synced:
        run = runs.get(server.last_run_id)
        trouble = run_trouble(run, now=now)
        if run is not None and trouble:
            found.append(SyncTrouble(server, run, trouble))
    return found, servers


def servers_with_unreadable_secrets() -> list[McpServer]:
    """Servers not retired whose env, headers or URL no configured key decrypts, by name."""
    servers = McpServer.objects.filter(retired_at__isnull=True).order_by("name")
    return unreadable_rows(servers, "env", "headers", "url")


# --- The unattended forecast ----------------------------------------------------------------

Axes = tuple[str, str, str]
_AXES_COLUMNS = ("side_effect_level", "destructive_behavior", "idempotency_behavior")


def _tool_axes(values: Axes) -> policy.ToolAxes:
    level, destructive, idempotency = values
    return policy.ToolAxes(
        SideEffectLevel(level), DestructiveBehavior(destructive), IdempotencyBehavior(idempotency)
    )


def _fails_unattended(axes: policy.ToolAxes, runtime: AgentRuntime) -> bool:
    """The worklist's test (views.gate._unattended_failures): a write tool the gate denies
    with nobody to ask, under the runtime's own ceiling and threshold."""
    return (
        axes.level == SideEffectLevel.MUTATING
        and policy.gate_decision(
            axes, ceiling=runtime.ceiling, exempt_at_or_below=runtime.exempt_at_or_below, attended=False
        ).decision
        == ToolDecision.DENY
    )


def _answered_whole(runtimes: list[AgentRuntime], failing: dict[int, set[Axes]]) -> dict[int, int]:
    """By runtime: how many of its failing tools a rule answers every call of (U5; never a
    destructive one), which the worklist counts as no longer failing. One query for the
    rules of every runtime, one for the tools they name."""
    rules = extensions.unattended_rules_many(runtimes)
    named: dict[int, set[tuple[str, str]]] = {
        runtime.pk: {
            key for key, found in rules.get(runtime.pk, {}).items() if any(r.every_call for r in found)
        }
        for runtime in runtimes
    }
    which = Q()
    for runtime in runtimes:
        for server, name in named[runtime.pk]:
            if server:
                which |= Q(source=ToolSource.MCP, server__name=server, server__enabled=True, name=name)
            else:
                which |= Q(source=ToolSource.LOCAL, runtime=runtime, name=name)
    answered: dict[int, int] = defaultdict(int)
    if not which:
        return answered
    tools = Tool.objects.filter(which, present=True).values_list(
        "runtime_id", "server__name", "name", *_AXES_COLUMNS
    )
    for runtime_id, server, name, *values in tools:
        axes_values: Axes = tuple(values)  # type: ignore[assignment]
        if _tool_axes(axes_values).effective_destructive == DestructiveBehavior.DESTRUCTIVE:
            continue
        # A local tool counts for its own runtime; a server's tool for each runtime naming it.
        holders = [runtime_id] if runtime_id is not None else [r.pk for r in runtimes]
        for pk in holders:
            if (server or "", name) in named[pk] and axes_values in failing[pk]:
                answered[pk] += 1
    return answered


def unattended_forecast(
    *, runtimes: list[AgentRuntime] | None = None, enabled_servers: set[int] | None = None
) -> list[tuple[str, int]]:
    """(runtime name, write tools that would fail on its unattended paths) for every enabled
    runtime with any, as the worklist counts them, most first. Two queries whatever the
    number of runtimes and tools (three when rules answer some tools whole), and two more
    for the enabled runtimes and servers unless the caller has read them."""
    if runtimes is None:
        runtimes = list(AgentRuntime.objects.filter(is_active=True).order_by("name"))
    runtimes = [runtime for runtime in runtimes if runtime.is_active]
    if not runtimes:
        return []
    active = {runtime.pk for runtime in runtimes}
    if enabled_servers is None:
        enabled_servers = set(McpServer.objects.filter(enabled=True).values_list("pk", flat=True))
    enabled = enabled_servers
    shared: Counter[Axes] = Counter()
    own: dict[int, Counter[Axes]] = defaultdict(Counter)
    # Present tools by owner and axes, read from the index `tool_present_owner_axes` alone
    # (no join: whose they are is decided here, a tool having a runtime or a server).
    counts = (
        Tool.objects.filter(present=True)
        .order_by()
        .values_list("runtime_id", "server_id", *_AXES_COLUMNS)
        .annotate(count=Count("*"))
    )
    for runtime_id, server_id, *values, count in counts:
        if server_id is not None and server_id in enabled:
            shared[tuple(values)] += count  # type: ignore[index]
        elif runtime_id in active:
            own[runtime_id][tuple(values)] += count  # type: ignore[index]
    totals: dict[int, int] = {}
    failing: dict[int, set[Axes]] = {}
    for runtime in runtimes:
        available = shared + own.get(runtime.pk, Counter())
        failing[runtime.pk] = {v for v in available if _fails_unattended(_tool_axes(v), runtime)}
        totals[runtime.pk] = sum(available[v] for v in failing[runtime.pk])
    with_failures = [runtime for runtime in runtimes if totals[runtime.pk]]
    answered = _answered_whole(with_failures, failing) if with_failures else {}
    forecast = [
        (runtime.name, totals[runtime.pk] - answered.get(runtime.pk, 0))
        for runtime in with_failures
        if totals[runtime.pk] - answered.get(runtime.pk, 0)
    ]
    return sorted(forecast, key=lambda row: (-row[1], row[0]))


def _forecast_key() -> str:
    # One per database, as verify_now's marker: several databases may share one Redis.
    return f"aimon:home:unattended-forecast:{connection.vendor}:{connection.settings_dict['NAME']}"


def unattended_forecast_cached(
    *, runtimes: list[AgentRuntime] | None = None, enabled_servers: set[int] | None = None
) -> list[tuple[str, int]]:
    found = cache.get(_forecast_key())
    if isinstance(found, list):
        return found
    found = unattended_forecast(runtimes=runtimes, enabled_servers=enabled_servers)
    cache.set(_forecast_key(), found, timeout=FORECAST_SECONDS)
    return found


def forecast_forget() -> None:
    """Drop the cached forecast (tests; a change that must show at once)."""
    cache.delete(_forecast_key())


# --- The section ----------------------------------------------------------------------------


def _worklist_url(runtime: str | None = None) -> str:
    base = reverse("registry:worklist")
    return f"{base}?{urlencode({'runtime': runtime})}" if runtime else base


def _sync_line(found: SyncTrouble) -> Line:
    url = reverse("registry:server-detail", args=[found.server.name])
    if found.trouble == TROUBLE_STUCK:
        return Line(found.server.name, url, note=SYNC_STUCK_NOTE)
    return Line(found.server.name, url, code=found.run.status, kind="sync")


def registry_section(request: HttpRequest) -> Iterator[Section]:
    if not request.user.has_perm(PERMISSION):
        return
    runtimes = list(
        AgentRuntime.objects.only("pk", "name", "ceiling", "exempt_at_or_below", "is_active").order_by("name")
    )
    unreadable = servers_with_unreadable_secrets()
    servers_url = reverse("registry:server-list")
    # Only when there is one: a broken key is an incident, not routine work.
    secrets = (
        (Figure("secrets", len(unreadable), SECRETS_LABEL, servers_url, help=SECRETS_HELP),)
        if unreadable
        else ()
    )
    secret_lines = [
        Line(server.name, reverse("registry:server-detail", args=[server.name]), note=SECRETS_NOTE)
        for server in unreadable[:LINES_SHOWN]
    ]
    if not runtimes:
        yield Section(
            key="registry",
            title=TITLE,
            figures=secrets,
            lines=tuple(secret_lines),
            first_step=Step(NO_RUNTIME, CREATE_RUNTIME, reverse("runtimes:create")),
        )
        return
    tools_url = reverse("registry:tool-list")
    awaiting = Tool.objects.filter(awaiting_review=True).count()
    findings = (
        RelayFinding.objects.filter(status=RelayFindingStatus.OPEN).values("pk")[: FINDINGS_LIMIT + 1].count()
    )
    troubles, servers = syncs_in_trouble()
    forecast = unattended_forecast_cached(
        runtimes=runtimes, enabled_servers={server.pk for server in servers if server.enabled}
    )
    lines = secret_lines + [_sync_line(found) for found in troubles[:LINES_SHOWN]]
    lines += [
        Line(counted(FORECAST_LINE, count, runtime=name), _worklist_url(name), note=FORECAST_NOTE)
        for name, count in forecast[:LINES_SHOWN]
    ]
    yield Section(
        key="registry",
        title=TITLE,
        figures=(
            Figure(
                "awaiting-review", awaiting, AWAITING_LABEL, f"{tools_url}?awaiting=on", help=AWAITING_HELP
            ),
            Figure(
                "relay-findings",
                findings,
                FINDINGS_LABEL,
                f"{tools_url}#relay-findings",
                limit=FINDINGS_LIMIT,
            ),
            Figure("syncs", len(troubles), SYNCS_LABEL, f"{servers_url}?sync={SYNC_FILTER}"),
            Figure("forecast", len(forecast), FORECAST_LABEL, _worklist_url(), help=FORECAST_HELP),
            *secrets,
        ),
        lines=tuple(lines),
        links=() if servers else (Step("", ADD_SERVER, reverse("registry:server-create")),),
    )
