"""The tool side-effect axes (T1-T3), as stored in the database, API and audit."""

from __future__ import annotations

from django.db import models

from aimon_admin.core import words

# T1's ladder lives in core so runtimes can use it without importing registry; re-exported here.
from aimon_admin.core.choices import SideEffectLevel as SideEffectLevel


class DestructiveBehavior(models.TextChoices):
    """T2: an unordered trait; undeclared means DESTRUCTIVE."""

    NON_DESTRUCTIVE = "NON_DESTRUCTIVE", "Not destructive"
    DESTRUCTIVE = "DESTRUCTIVE", "Destructive"


class IdempotencyBehavior(models.TextChoices):
    """T3: retry advice only; no gate reads it."""

    IDEMPOTENT = "IDEMPOTENT", "Idempotent"
    NON_IDEMPOTENT = "NON_IDEMPOTENT", "Not idempotent"


class SubjectKind(models.TextChoices):
    """U1: how a tool's subject is read before rules and grants match it."""

    TEXT = "TEXT", "Text (matched as written)"
    COMMAND = "COMMAND", "Shell command (split into words as a shell would)"
    PATH = "PATH", "File path (normalised first)"


class ToolSource(models.TextChoices):
    LOCAL = "LOCAL", "Local (the runtime's own)"
    MCP = "MCP", "MCP server"


class AnnotationTrust(models.TextChoices):
    """T13: exactly two values; IGNORE is the default."""

    IGNORE = "IGNORE", "Ignore the server's claims"
    TRUST = "TRUST", "Trust the server's claims"


class McpTransport(models.TextChoices):
    STDIO = "STDIO", "stdio (a local command)"
    STREAMABLE_HTTP = "STREAMABLE_HTTP", "Streamable HTTP"


class ToolDecision(models.TextChoices):
    ALLOW = "ALLOW", "Allow"
    ASK = "ASK", "Ask"
    DENY = "DENY", "Deny"


class GateReason(models.TextChoices):
    """Why the ceiling and gate decided as they did (docs/api.md "Tools")."""

    ABOVE_CEILING = "ABOVE_CEILING", "Above this runtime's ceiling: hidden and refused"
    READ_ONLY_EXEMPT = "READ_ONLY_EXEMPT", "Read-only: never asks"
    DESTRUCTIVE_ALWAYS_ASKS = "DESTRUCTIVE_ALWAYS_ASKS", "Asks every time: destructive"
    EXEMPT_AT_OR_BELOW = "EXEMPT_AT_OR_BELOW", "At or below the gate threshold: no question"
    NOT_EXEMPT = "NOT_EXEMPT", "Above the gate threshold: asks"
    UNATTENDED_NO_CHANNEL = "UNATTENDED_NO_CHANNEL", "Would ask, but nobody can be asked: denied"
    # A tool call's whole chain (part U of docs/rules.md) answers with these beside the gate's own.
    DENIED_BY_RULE = "DENIED_BY_RULE", "Denied by an operator's rule"
    ALLOWED_BY_RULE = "ALLOWED_BY_RULE", "Allowed by an operator's rule"
    ASKED_BY_RULE = "ASKED_BY_RULE", "An operator's rule says to ask"
    PRE_APPROVED = "PRE_APPROVED", "Unattended, and answered by a pre-approval"
    GRANTED = "GRANTED", "A person allowed it"
    DENIED = "DENIED", "A person denied it"


class ReviewFinding(models.TextChoices):
    """An operator's finding on a MUTATING tool still at the default DESTRUCTIVE (T2).
    The labels are what the review form and the tool page say."""

    CONFIRMED_DESTRUCTIVE = "CONFIRMED_DESTRUCTIVE", "Confirmed destructive: keep asking"
    SHOULD_DECLARE_NON_DESTRUCTIVE = (
        "SHOULD_DECLARE_NON_DESTRUCTIVE",
        "Not destructive: its declaration should say so",
    )
    NEEDS_APPROVAL_HANDLER = (
        "NEEDS_APPROVAL_HANDLER",
        "Needed unattended: give that path an approval handler or redesign the tool",
    )


class SyncStatus(models.TextChoices):
    QUEUED = "QUEUED", "Queued"
    RUNNING = "RUNNING", "Running"
    SUCCEEDED = "SUCCEEDED", "Succeeded"
    FAILED = "FAILED", "Failed"


class RelayFindingStatus(models.TextChoices):
    """T15: what became of a definition a runtime relayed differently from the served one."""

    OPEN = "OPEN", "Open: waiting for an operator"
    ACCEPTED = "ACCEPTED", "Accepted: now the served definition"
    DISMISSED = "DISMISSED", "Dismissed"


# Plain words for the codes above on pages (core.words; `{% words code "kind" %}`).
words.register("level", DestructiveBehavior, IdempotencyBehavior)
words.register("trust", AnnotationTrust, badge="trust")
words.register("decision", ToolDecision, badge="decision")
words.register("reason", GateReason)
words.register("finding", ReviewFinding)
words.register("sync", SyncStatus, badge="sync", data="status")
words.register("transport", McpTransport)
words.register("subject-kind", SubjectKind)
