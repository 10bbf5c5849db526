"""Prometheus metrics: what the product counts, and `GET /metrics`, which serves them.

Every metric that counts is defined here, once, and counted at the one place where what it
counts happens (its help text, or the helper below, names it); apps define none of their
own. With the scrape-time reads below, that is what the product exports (docs/operations.md
"Metrics", and the sample dashboard docs/grafana-dashboard.json, whose every name a test
checks against a scrape).

Counted in every process that does the work: the WSGI and ASGI servers' workers, the Celery
worker and its pool. With `PROMETHEUS_MULTIPROC_DIR` set (scripts/prod.py sets it to a fresh
folder of its run directory at every start) each process writes its values to memory-mapped
files there and a scrape sums them all (prometheus_client's multiprocess mode); the
supervisor marks a process that has gone as dead, which drops its live gauges
(`mark_process_dead`). Unset (`make run`, the tests), the values are this process's own.

What is a question about the database rather than about events (requests waiting now, the
last chain verification) is not counted: it is read at scrape time, by the collectors apps
register with `at_scrape` (approvals, audit), cheaply, in the scraping process alone.

The decision path pays one counter increment per verdict and one histogram observation per
call; nothing here reads the database or takes a lock beyond the library's own.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import os
import time
from collections.abc import Callable, Iterable

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics_core import Metric

from aimon_admin.core.addresses import client_ip

MULTIPROC_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
# The _created series double every counter's lines and mean nothing in multiprocess mode.
disable_created_metrics()

# --- Decisions -------------------------------------------------------------------------------------

DECISIONS = Counter(
    "aimon_decisions",
    "Decisions answered to runtimes, one per skill of a skill decision and one per tool call: "
    "kind SKILL or TOOL, decision ALLOW, ASK or DENY, source the layer that answered.",
    ["kind", "decision", "source"],
)
DECISION_SECONDS = Histogram(
    "aimon_decision_duration_seconds",
    "Server time of one decision call, from its read to its verdict (the fused token lookup "
    "included; the HTTP layer and body parsing not).",
    ["kind"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)

# --- Approval requests -----------------------------------------------------------------------------

REQUESTS_OPENED = Counter(
    "aimon_approval_requests_opened",
    "Approval requests opened waiting for a person (one the chain answered whole at once is not counted).",
    ["kind"],
)
REQUESTS_ANSWERED = Counter(
    "aimon_approval_requests_answered", "Approval requests closed by people's answers.", ["kind"]
)
REQUESTS_EXPIRED = Counter(
    "aimon_approval_requests_expired", "Approval requests nobody answered in time (S9).", ["kind"]
)
REQUESTS_CANCELLED = Counter(
    "aimon_approval_requests_cancelled",
    "Approval requests cancelled by their runtime or dismissed by a person (S9).",
    ["kind"],
)
REQUESTS_ESCALATED = Counter(
    "aimon_approval_requests_escalated",
    "Approval requests sent to the operators and the runtime's owner after waiting their "
    "runtime's time (P2).",
    ["kind"],
)
SCOPE_ESCALATIONS = Counter(
    "aimon_approval_scope_escalations",
    "Session answers to a request with no session, written agent-wide (S6).",
    ["kind"],
)
ANSWER_WAIT_SECONDS = Histogram(
    "aimon_approval_answer_wait_seconds",
    "Time from a request's opening to the answer that closed it.",
    ["kind"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600),
)
LONG_POLLS_WAITING = Gauge(
    "aimon_long_polls_waiting",
    "Long-polls (GET approval request ?wait=N) waiting now, over every live process.",
    multiprocess_mode="livesum",
)

# --- Notifications, MCP syncs, the audit chain ----------------------------------------------------

NOTIFICATION_ATTEMPTS = Counter(
    "aimon_notification_attempts",
    "Messages sent to notification channels (a digest is one message): channel_kind EMAIL, "
    "APPRISE or WEBHOOK; outcome SENT, FAILED (tried again later) or REFUSED (not retried).",
    ["channel_kind", "outcome"],
)
MCP_SYNC_RUNS = Counter(
    "aimon_mcp_sync_runs",
    "MCP server syncs finished: outcome SUCCEEDED or FAILED.",
    ["outcome"],
)
AUDIT_VERIFICATIONS = Counter(
    "aimon_audit_verifications",
    "Audit chain verifications recorded: outcome OK or BROKEN.",
    ["outcome"],
)

# --- What could not be reached ---------------------------------------------------------------------

DATABASE_ERRORS = Counter(
    "aimon_database_errors",
    "Requests answered 503 because the database could not be reached: surface api or page.",
    ["surface"],
)
REDIS_ERRORS = Counter(
    "aimon_redis_errors",
    "Redis operations that failed: use cache (read as a miss, or a write skipped), hints "
    "(a wake-up or a task not sent) or wakeups (a long-poll's subscription lost; it polls).",
    ["use"],
)


def decisions_observe(kind: str, started: float, verdicts: Iterable[tuple[str, str]]) -> None:
    """A decision call answered (approvals: `decide_skills`, `tool_call_decide`, which every
    runtime's decision goes through): each verdict's (decision, source), and the call's time
    since `started` (`time.perf_counter()` when its read began)."""
    DECISION_SECONDS.labels(kind).observe(time.perf_counter() - started)
    for decision, source in verdicts:
        DECISIONS.labels(kind, decision, source).inc()


def count_on_commit(counter: Counter, *labels: str) -> None:
    """`counter` counted once the transaction around this call commits (at once outside one):
    what rolls back counted nothing."""
    transaction.on_commit(counter.labels(*labels).inc)


def request_answered_on_commit(kind: str, waited_seconds: float) -> None:
    """A request closed by people's answers (approvals: `request_answer`), `waited_seconds`
    after it opened; counted once the transaction around this call commits."""

    def count() -> None:
        REQUESTS_ANSWERED.labels(kind).inc()
        ANSWER_WAIT_SECONDS.labels(kind).observe(waited_seconds)

    transaction.on_commit(count)


# --- Scrape-time collectors ------------------------------------------------------------------------

Collect = Callable[[], Iterable[Metric]]
_at_scrape: list[Collect] = []


def at_scrape(collect: Collect) -> None:
    """Add `collect()`'s families to every scrape (once, however often it is registered): an
    app's reads of what holds now, from its AppConfig.ready. Each must be cheap (an index read
    or two): it runs on every scrape."""
    if collect not in _at_scrape:
        _at_scrape.append(collect)


class _ScrapeTime:
    """The registered collectors as one prometheus_client collector."""

    def collect(self) -> Iterable[Metric]:
        for collect in _at_scrape:
            yield from collect()


def exposition() -> bytes:
    """Every metric in Prometheus' text format: every process's (multiprocess mode) or this
    process's own, and the scrape-time reads."""
    folder = os.environ.get(MULTIPROC_DIR_VARIABLE)
    if folder:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=folder)
    else:
        registry = CollectorRegistry()
        registry.register(_ThisProcess())
    registry.register(_ScrapeTime())
    return generate_latest(registry)


class _ThisProcess:
    """This process's metrics (the default registry: ours, and the library's process and
    platform collectors), when there is no multiprocess folder."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


# --- GET /metrics ----------------------------------------------------------------------------------

METRICS_OFF_MESSAGE = (
    "Metrics are not served: set AIMON_METRICS_TOKEN (scrape with Authorization: Bearer <token>) "
    "or AIMON_METRICS_ALLOW (the addresses that may scrape without one)."
)
METRICS_TOKEN_MESSAGE = "Send the metrics token as Authorization: Bearer <token>."  # noqa: S105 - words, not a secret # nosec B105
METRICS_ADDRESS_MESSAGE = "This address may not read the metrics (AIMON_METRICS_ALLOW)."


@functools.cache
def _networks(allowed: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in allowed)


def address_allowed(address: str, allowed: Iterable[str]) -> bool:
    """Whether `address` is in one of the `allowed` addresses or networks (CIDR)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in _networks(tuple(allowed)) if network.version == ip.version)


def _token_matches(request: HttpRequest, token: str) -> bool:
    scheme, _, supplied = request.headers.get("Authorization", "").partition(" ")
    if not token or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(supplied.strip().encode(), token.encode())


def _refused(status: int, message: str) -> HttpResponse:
    response = HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """`GET /metrics` for Prometheus: with the metrics token (compared in constant time), or
    from an allowed address. Neither configured, nobody reads them (403); a token configured
    and not sent (or wrong), 401; an address not allowed and no token configured, 403."""
    token = settings.AIMON_METRICS_TOKEN
    allowed = settings.AIMON_METRICS_ALLOW
    if not (_token_matches(request, token) or (allowed and address_allowed(client_ip(request), allowed))):
        if token:
            return _refused(401, METRICS_TOKEN_MESSAGE)
        return _refused(403, METRICS_ADDRESS_MESSAGE if allowed else METRICS_OFF_MESSAGE)
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
