"""Tools (a runtime's own, or an MCP server's), MCP servers, and MCP sync runs."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinValueValidator,
    RegexValidator,
    URLValidator,
)
from django.db import models
from django.db.models import Q
from django.db.models.functions import Length
from django.db.models.lookups import LessThanOrEqual

from aimon_admin.core.encryption import EncryptedJSONField, EncryptedTextField
from aimon_admin.registry.choices import (
    AnnotationTrust,
    DestructiveBehavior,
    IdempotencyBehavior,
    McpTransport,
    RelayFindingStatus,
    ReviewFinding,
    SideEffectLevel,
    SubjectKind,
    SyncStatus,
    ToolSource,
)
from aimon_admin.registry.policy import ToolAxes

SERVER_NAME_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
    "Use 1-100 letters, digits, dots, dashes or underscores, starting with a letter or digit.",
)


REVIEW_NOTE_MAX = 2000
# A tool's description as stored and served: MCP servers and runtimes write it. The
# fingerprint is of the definition as sent, so a longer one cut here still drifts as sent.
TOOL_DESCRIPTION_MAX = 10_000

# A Streamable HTTP server is reached over HTTP: ftp://, file:// and host-less URLs are
# refused when saved, not at the first sync.
MCP_URL_MAX = 500
MCP_URL_MESSAGE = "Use an http:// or https:// URL with a host, e.g. https://mcp.example.com/mcp."
MCP_URL_VALIDATOR = URLValidator(schemes=["http", "https"], message=MCP_URL_MESSAGE, code="http_url")


def _in(field: str, choices: type[models.TextChoices], name: str, label: str) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=Q(**{f"{field}__in": choices.values}),
        name=name,
        violation_error_message=f"Unknown {label}.",
    )


class McpServer(models.Model):
    name = models.CharField(max_length=100, unique=True, validators=[SERVER_NAME_VALIDATOR])
    transport = models.CharField(max_length=20, choices=McpTransport.choices)
    command = models.CharField(max_length=500, blank=True, default="")
    args = models.JSONField(default=list, blank=True)
    # Encrypted at rest (core.encryption): values for the upstream server, often API keys.
    env = EncryptedJSONField(default=dict, blank=True, help_text="Never sent to runtimes.")
    # Encrypted too: a URL may carry credentials or a token in its query.
    url = EncryptedTextField(blank=True, default="", validators=[MaxLengthValidator(MCP_URL_MAX)])
    headers = EncryptedJSONField(default=dict, blank=True, help_text="Never sent to runtimes.")
    timeout_seconds = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(600)]
    )
    annotation_trust = models.CharField(
        max_length=8, choices=AnnotationTrust.choices, default=AnnotationTrust.IGNORE
    )
    enabled = models.BooleanField(default=True)
    # Retired: disabled for good, its stored secrets erased; the row and its tools stay.
    retired_at = models.DateTimeField(null=True, blank=True)
    retired_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            _in("transport", McpTransport, "mcp_server_transport_valid", "transport"),
            models.CheckConstraint(
                condition=Q(retired_at__isnull=True) | Q(enabled=False),
                name="mcp_server_retired_is_disabled",
                violation_error_message="A retired MCP server cannot be enabled.",
            ),
            models.CheckConstraint(
                condition=Q(retired_by__isnull=True) | Q(retired_at__isnull=False),
                name="mcp_server_retired_by_needs_retired_at",
                violation_error_message="A server can only name who retired it once it is retired.",
            ),
            _in("annotation_trust", AnnotationTrust, "mcp_server_trust_valid", "annotation trust"),
            models.CheckConstraint(
                condition=~Q(transport=McpTransport.STDIO) | ~Q(command=""),
                name="mcp_server_stdio_has_command",
                violation_error_message="A stdio server needs a command.",
            ),
            models.CheckConstraint(
                condition=~Q(transport=McpTransport.STREAMABLE_HTTP) | ~Q(url=""),
                name="mcp_server_http_has_url",
                violation_error_message="A streamable HTTP server needs a URL.",
            ),
            models.CheckConstraint(
                condition=Q(timeout_seconds__gte=1, timeout_seconds__lte=600),
                name="mcp_server_timeout_range",
                violation_error_message="The timeout must be 1-600 seconds.",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_retired(self) -> bool:
        return self.retired_at is not None

    def clean(self) -> None:
        """A Streamable HTTP URL is http(s) with a host, refused at save (full_clean)."""
        if self.transport == McpTransport.STREAMABLE_HTTP and self.url:
            try:
                MCP_URL_VALIDATOR(self.url)
            except ValidationError as exc:
                raise ValidationError({"url": MCP_URL_MESSAGE}) from exc


class McpSyncRun(models.Model):
    """One sync of an MCP server's tools: its progress while it runs, its outcome after."""

    server = models.ForeignKey(McpServer, on_delete=models.PROTECT, related_name="sync_runs")
    status = models.CharField(max_length=12, choices=SyncStatus.choices, default=SyncStatus.QUEUED)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    progress = models.CharField(max_length=300, blank=True, default="")
    tools_seen = models.PositiveIntegerField(default=0)
    tools_added = models.PositiveIntegerField(default=0)
    tools_changed = models.PositiveIntegerField(default=0)
    tools_absent = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    # While RUNNING: until when the worker's lease holds. The worker renews it every few
    # seconds; once it lapses the worker is gone and the run is failed (sync/runs.py).
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            _in("status", SyncStatus, "mcp_sync_status_valid", "sync status"),
            models.UniqueConstraint(
                fields=["server"],
                condition=Q(status__in=[SyncStatus.QUEUED, SyncStatus.RUNNING]),
                name="mcp_sync_one_active_per_server",
                violation_error_message="A sync of this server is already queued or running.",
            ),
        ]

    def __str__(self) -> str:
        return f"sync of {self.server.name} ({self.status})"

    @property
    def active(self) -> bool:
        return self.status in (SyncStatus.QUEUED, SyncStatus.RUNNING)


class Tool(models.Model):
    """A tool as the gate sees it. After resolution (T12) nothing downstream can tell an
    MCP tool from a local one: both carry the same three resolved axes."""

    source = models.CharField(max_length=8, choices=ToolSource.choices)
    runtime = models.ForeignKey(
        "runtimes.AgentRuntime", on_delete=models.PROTECT, null=True, blank=True, related_name="tools"
    )
    server = models.ForeignKey(
        McpServer, on_delete=models.PROTECT, null=True, blank=True, related_name="tools"
    )
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    input_schema = models.JSONField(default=dict, blank=True)
    # LOCAL: the axes the runtime declared, as sent. MCP: the annotations verbatim (T10),
    # unknown fields and wrong types included.
    claims = models.JSONField(null=True, blank=True)
    fingerprint = models.CharField(max_length=64)

    side_effect_level = models.CharField(max_length=16, choices=SideEffectLevel.choices)
    destructive_behavior = models.CharField(max_length=16, choices=DestructiveBehavior.choices)
    idempotency_behavior = models.CharField(max_length=16, choices=IdempotencyBehavior.choices)
    open_world_hint = models.BooleanField(default=True)  # T14: shown, read by no axis
    explanations = models.JSONField(default=dict, blank=True)
    claim_warnings = models.JSONField(default=list, blank=True)
    resolved_at = models.DateTimeField()
    resolved_under_trust = models.CharField(
        max_length=8, choices=AnnotationTrust.choices, blank=True, default=""
    )

    # T15: the definition the server's own sync first listed or an operator accepted (none
    # yet: a tool only relayed, served to no runtime), and whether a change that claims less
    # risk is waiting for review (resolved as IGNORE meanwhile).
    accepted_claims = models.JSONField(null=True, blank=True)
    accepted_fingerprint = models.CharField(max_length=64, blank=True, default="")
    awaiting_review = models.BooleanField(default=False)

    present = models.BooleanField(default=True)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()
    absent_since = models.DateTimeField(null=True, blank=True)

    # An operator's finding on a MUTATING tool still at the default DESTRUCTIVE (T2).
    review_finding = models.CharField(max_length=40, choices=ReviewFinding.choices, blank=True, default="")
    review_note = models.TextField(blank=True, default="")
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            _in("source", ToolSource, "tool_source_valid", "tool source"),
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("description"), TOOL_DESCRIPTION_MAX),
                name="tool_description_length",
                violation_error_message=f"A tool description is at most {TOOL_DESCRIPTION_MAX} characters.",
            ),
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("review_note"), REVIEW_NOTE_MAX),
                name="tool_review_note_length",
                violation_error_message=f"A review note is at most {REVIEW_NOTE_MAX} characters.",
            ),
            _in("side_effect_level", SideEffectLevel, "tool_level_valid", "side-effect level"),
            _in(
                "destructive_behavior", DestructiveBehavior, "tool_destructive_valid", "destructive behavior"
            ),
            _in(
                "idempotency_behavior", IdempotencyBehavior, "tool_idempotency_valid", "idempotency behavior"
            ),
            models.CheckConstraint(
                condition=(
                    Q(source=ToolSource.LOCAL, runtime__isnull=False, server__isnull=True)
                    | Q(source=ToolSource.MCP, runtime__isnull=True, server__isnull=False)
                ),
                name="tool_owner_matches_source",
                violation_error_message=(
                    "A local tool belongs to a runtime, an MCP tool to its server, never both."
                ),
            ),
            models.CheckConstraint(
                condition=~Q(side_effect_level=SideEffectLevel.READ_ONLY)
                | Q(destructive_behavior=DestructiveBehavior.NON_DESTRUCTIVE),
                name="tool_read_only_is_non_destructive",
                violation_error_message=(
                    "A read-only tool is stored as non-destructive: a tool that changes nothing "
                    "cannot destroy anything."
                ),
            ),
            models.UniqueConstraint(
                fields=["runtime", "name"],
                condition=Q(source=ToolSource.LOCAL),
                name="tool_local_name_unique_per_runtime",
                violation_error_message="This runtime already has a tool of that name.",
            ),
            models.UniqueConstraint(
                fields=["server", "name"],
                condition=Q(source=ToolSource.MCP),
                name="tool_mcp_name_unique_per_server",
                violation_error_message="This server already has a tool of that name.",
            ),
        ]
        indexes = [
            models.Index(fields=["side_effect_level", "destructive_behavior"], name="tool_axes"),
            models.Index(fields=["server", "present"], name="tool_server_present"),
            models.Index(fields=["runtime", "present"], name="tool_runtime_present"),
            # The tools page pages through name order (keyset on name, id).
            models.Index(fields=["name", "id"], name="tool_name_id"),
            # Only the tools awaiting review (few): the home counts them, the tools page's
            # filter pages through them in name order, neither reading every tool.
            models.Index(
                fields=["name", "id"], condition=Q(awaiting_review=True), name="tool_awaiting_review"
            ),
            # The home's unattended forecast counts present tools by owner and axes: this small
            # index holds every column it reads, so the count never reads the wide rows.
            models.Index(
                fields=[
                    "runtime",
                    "server",
                    "side_effect_level",
                    "destructive_behavior",
                    "idempotency_behavior",
                ],
                condition=Q(present=True),
                name="tool_present_owner_axes",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.server.name}/{self.name}" if self.server_id else self.name

    @property
    def axes(self) -> ToolAxes:
        return ToolAxes(
            SideEffectLevel(self.side_effect_level),
            DestructiveBehavior(self.destructive_behavior),
            IdempotencyBehavior(self.idempotency_behavior),
        )

    @property
    def read_only(self) -> bool:
        return self.side_effect_level == SideEffectLevel.READ_ONLY

    @property
    def relayed_only(self) -> bool:
        """T15: an MCP tool heard of only from runtimes' relays. Neither the server's own
        sync nor an operator has given it a definition yet, so it is served to no runtime;
        what runtimes relayed of it is kept in its relay findings."""
        return self.server_id is not None and not self.accepted_fingerprint


class RelayFinding(models.Model):
    """T15: a definition of an MCP tool that a runtime relayed differently from the one
    every runtime is served. It is that runtime's word only: kept verbatim and shown to
    operators, never served, until an operator accepts it (or dismisses it)."""

    tool = models.ForeignKey(Tool, on_delete=models.PROTECT, related_name="relay_findings")
    runtime = models.ForeignKey("runtimes.AgentRuntime", on_delete=models.PROTECT, related_name="+")
    # As relayed, verbatim (T10): any JSON, so the description too is a JSON value.
    description = models.JSONField(null=True, blank=True)
    input_schema = models.JSONField(null=True, blank=True)
    annotations = models.JSONField(null=True, blank=True)
    fingerprint = models.CharField(max_length=64)
    status = models.CharField(
        max_length=12, choices=RelayFindingStatus.choices, default=RelayFindingStatus.OPEN
    )
    times_seen = models.PositiveIntegerField(default=1)
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_seen_at", "-id"]
        constraints = [
            _in("status", RelayFindingStatus, "relay_finding_status_valid", "relay finding status"),
            models.UniqueConstraint(
                fields=["tool", "runtime", "fingerprint"],
                condition=Q(status=RelayFindingStatus.OPEN),
                name="relay_finding_one_open_per_definition",
                violation_error_message="This runtime's relayed definition is already an open finding.",
            ),
            models.CheckConstraint(
                condition=Q(status=RelayFindingStatus.OPEN, closed_at__isnull=True)
                | (~Q(status=RelayFindingStatus.OPEN) & Q(closed_at__isnull=False)),
                name="relay_finding_closed_at_iff_closed",
                violation_error_message="An open finding has no closing time; a closed one has one.",
            ),
        ]
        indexes = [models.Index(fields=["status", "tool"], name="relay_finding_status_tool")]

    def __str__(self) -> str:
        return f"relay finding on {self.tool} from {self.runtime}"


class ToolSubject(models.Model):
    """U1: which argument of a tool is its call's *subject* (`command` for a shell tool,
    `path` for a file tool), so argument rules and grants can match its value. Named by
    tool, not by row: a runtime's own tools are replaced whole on every registration, and a
    subject may be set before the tool is first seen. None by default."""

    server = models.CharField(
        max_length=100, blank=True, default="", help_text="Empty: a runtime's own tool."
    )
    tool = models.CharField(max_length=200)
    argument = models.CharField(max_length=200)
    kind = models.CharField(
        max_length=16,
        choices=SubjectKind.choices,
        default=SubjectKind.TEXT,
        help_text="How the subject is read: text as written, a shell command, a file path.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["server", "tool"]
        constraints = [
            models.UniqueConstraint(
                fields=["server", "tool"],
                name="tool_subject_one_per_tool",
                violation_error_message="This tool already has a subject argument.",
            ),
            models.CheckConstraint(
                condition=~Q(tool="") & ~Q(argument=""),
                name="tool_subject_names_both",
                violation_error_message="A subject names its tool and the argument.",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=SubjectKind.values),
                name="tool_subject_kind_valid",
                violation_error_message="A subject is read as text, a command or a path.",
            ),
        ]

    def __str__(self) -> str:
        name = f"{self.server}/{self.tool}" if self.server else self.tool
        return f"{name}: {self.argument}"
