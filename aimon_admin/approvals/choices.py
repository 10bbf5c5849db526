"""Skill approval enums (part S of docs/rules.md): the same in the database, API and audit."""

from __future__ import annotations

from django.db import models

from aimon_admin.core import words


class SkillDecision(models.TextChoices):
    ALLOW = "ALLOW", "Allow"
    DENY = "DENY", "Deny"
    ASK = "ASK", "Ask"


class GrantDecision(models.TextChoices):
    """What a grant holds: only a concrete answer is ever stored."""

    ALLOW = "ALLOW", "Allow"
    DENY = "DENY", "Deny"


class GrantKind(models.TextChoices):
    """What a grant answers for: a skill (part S) or a tool's calls (part U)."""

    SKILL = "SKILL", "Skill"
    TOOL = "TOOL", "Tool"


class GrantScope(models.TextChoices):
    """Ordered narrowest first: TURN < SESSION < AGENT."""

    TURN = "TURN", "This turn"
    SESSION = "SESSION", "This session"
    AGENT = "AGENT", "Every session of this agent"


class ItemScope(models.TextChoices):
    """Where an answered item's answer holds: a grant's scope, or REQUEST — the runtime is
    told DENY for this one request and nothing is stored in any grant store (S13's
    *Deny this request*)."""

    TURN = "TURN", "This turn"
    SESSION = "SESSION", "This session"
    AGENT = "AGENT", "Every session of this agent"
    REQUEST = "REQUEST", "This request only (nothing stored)"
    CALL = "CALL", "This call only, with exactly these arguments"


class DecisionSource(models.TextChoices):
    """The layer of the chain that answered (S2)."""

    TURN = "TURN", "Turn"
    SESSION = "SESSION", "Session"
    INVOKING_SESSION = "INVOKING_SESSION", "Invoking session"
    AGENT = "AGENT", "Agent"
    RULE = "RULE", "Rule"
    DEFAULT = "DEFAULT", "Default"


class ToolCallSource(models.TextChoices):
    """The layer of a tool call's chain that answered (part U of docs/rules.md)."""

    CEILING = "CEILING", "The runtime's ceiling"
    RULE = "RULE", "An operator's rule"
    CALL = "CALL", "An approval of this very call"
    TURN = "TURN", "Turn"
    SESSION = "SESSION", "Session"
    INVOKING_SESSION = "INVOKING_SESSION", "Invoking session"
    AGENT = "AGENT", "Agent"
    GATE = "GATE", "The tool's side-effect gate"


# What an answered item's `source` may hold: the layer that decided it at creation, of the skill
# chain (S2) or of a tool call's chain (part U), which names the same layers and a few more.
ITEM_SOURCE_CHOICES: list[tuple[str, str]] = DecisionSource.choices + [
    (value, label) for value, label in ToolCallSource.choices if value not in DecisionSource.values
]


class RequestKind(models.TextChoices):
    """What a request asks about: skills (part S) or one tool call (part U)."""

    SKILL = "SKILL", "Skills"
    TOOL = "TOOL", "A tool call"


class Answer(models.TextChoices):
    """The buttons (S4, U3; the labels docs/api.md uses), and S13's *Deny this request*, which
    stores nothing: offered where a Deny would hold beyond what this person may give or a rule
    allows. *Allow this call* is a tool request's only: it stores no grant, the request's digest
    is the approval (U4)."""

    ALLOW_CALL = "ALLOW_CALL", "Allow this call"
    ALLOW_ONCE = "ALLOW_ONCE", "Allow once"
    ALLOW_SESSION = "ALLOW_SESSION", "Allow for this session"
    ALLOW_AGENT = "ALLOW_AGENT", "Always allow for this agent"
    DENY = "DENY", "Deny"
    DENY_REQUEST = "DENY_REQUEST", "Deny this request"


class GrantOrigin(models.TextChoices):
    """How a grant came to be."""

    ANSWER = "ANSWER", "A person's answer"
    ESCALATION = "ESCALATION", "A session answer with no session, made agent-wide"  # S6
    ABORT = "ABORT", "An unanswered request aborted"  # S9


class RevokeReason(models.TextChoices):
    CLEAR = "CLEAR", "Session cleared"
    REVOKE = "REVOKE", "Session approvals revoked"
    REVOKE_AGENT = "REVOKE_AGENT", "Agent-wide approvals revoked"
    SINGLE = "SINGLE", "Revoked on its own"
    SUPERSEDED = "SUPERSEDED", "Replaced by a newer answer"
    EXPIRED = "EXPIRED", "The session was idle past its TTL"


class RequestStatus(models.TextChoices):
    PENDING = "PENDING", "Pending"
    ANSWERED = "ANSWERED", "Answered"
    EXPIRED = "EXPIRED", "Expired"
    CANCELLED = "CANCELLED", "Cancelled"


class RuleAction(models.TextChoices):
    ALLOW = "ALLOW", "Allow"
    DENY = "DENY", "Deny"
    ASK = "ASK", "Ask"


# Plain words for the codes above on pages (core.words; `{% words code "kind" %}`). Decisions
# share the registry's badge ("decision"); a grant's and an item's scopes read alike.
words.register("decision", SkillDecision, GrantDecision, RuleAction, badge="decision")
words.register("scope", GrantScope, ItemScope)
words.register("origin", GrantOrigin)
