"""Sessions, grants, approval requests and skill rules (part S of docs/rules.md).

Grants are never deleted: revoking one sets `revoked_at`/`revoked_by`, so an auditor
can ask what was in force at any moment.

Over 500 lines on purpose: Django's models module of the app, every table of skill and tool
approvals with its named constraints; the constraints are the rules' last line of defence and
read best beside their fields.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Length
from django.db.models.lookups import LessThanOrEqual

from aimon_admin.approvals.choices import (
    ITEM_SOURCE_CHOICES,
    Answer,
    GrantDecision,
    GrantKind,
    GrantOrigin,
    GrantScope,
    ItemScope,
    RequestKind,
    RequestStatus,
    RevokeReason,
    RuleAction,
)

# P3: how many distinct people must allow what a rule asks about.
APPROVERS_MAX = 3


def _approvers_valid(field: str, name: str) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=Q(**{f"{field}__gte": 1, f"{field}__lte": APPROVERS_MAX}),
        name=name,
        violation_error_message=f"People who must allow: 1 to {APPROVERS_MAX}.",
    )


def _in(field: str, choices: type[models.TextChoices], name: str, label: str) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=Q(**{f"{field}__in": choices.values}),
        name=name,
        violation_error_message=f"Unknown {label}.",
    )


class Session(models.Model):
    """A runtime's session, keyed by (runtime, session_id); its principal is fixed when
    it is first seen (S12)."""

    runtime = models.ForeignKey("runtimes.AgentRuntime", on_delete=models.PROTECT, related_name="sessions")
    session_id = models.CharField(max_length=200)
    principal = models.CharField(max_length=200, blank=True, default="")
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["-last_seen_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["runtime", "session_id"],
                name="session_unique_per_runtime",
                violation_error_message="This runtime already has a session with that id.",
            )
        ]
        indexes = [models.Index(fields=["principal", "-last_seen_at"], name="session_principal")]

    def __str__(self) -> str:
        return f"{self.runtime.name}/{self.session_id}"


class GrantQuerySet(models.QuerySet):
    def active(self) -> GrantQuerySet:
        return self.filter(revoked_at__isnull=True)


# subject_patterns.SUBJECT_PATTERN_MAX. Kept short so a unique index holding it, the tool and the
# server stays under PostgreSQL's b-tree row limit (2,704 bytes) even in 4-byte characters.
SUBJECT_PATTERN_MAX = 300


class Grant(models.Model):
    """A concrete ALLOW or DENY for one skill, or for one tool narrowed to a subject
    pattern (U3), at TURN, SESSION or AGENT scope.

    `skill` names the skill, or for a TOOL grant the tool (`server` its MCP server, empty
    for a runtime's own tool); `pattern` is a tool grant's subject pattern, empty for the
    whole tool and always empty for a skill."""

    runtime = models.ForeignKey("runtimes.AgentRuntime", on_delete=models.PROTECT, related_name="grants")
    kind = models.CharField(
        max_length=8, choices=GrantKind.choices, default=GrantKind.SKILL, db_default=GrantKind.SKILL
    )
    scope = models.CharField(max_length=8, choices=GrantScope.choices)
    decision = models.CharField(max_length=8, choices=GrantDecision.choices)
    skill = models.CharField(max_length=200)
    server = models.CharField(max_length=100, blank=True, default="", db_default="")
    pattern = models.CharField(max_length=SUBJECT_PATTERN_MAX, blank=True, default="", db_default="")
    session = models.ForeignKey(
        Session, on_delete=models.PROTECT, null=True, blank=True, related_name="grants"
    )
    turn_id = models.CharField(max_length=200, blank=True, default="")
    origin = models.CharField(max_length=12, choices=GrantOrigin.choices)
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    request = models.ForeignKey(
        "approvals.ApprovalRequest", on_delete=models.PROTECT, null=True, blank=True, related_name="grants"
    )
    # P3: how many distinct people's answer wrote it (an item's approvers); an ALLOW answers a
    # call or skill only where no rule covering it needs more.
    approvers = models.PositiveSmallIntegerField(default=1, db_default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    revoke_reason = models.CharField(max_length=16, choices=RevokeReason.choices, blank=True, default="")

    objects = GrantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            _in("kind", GrantKind, "grant_kind_valid", "grant kind"),
            _in("scope", GrantScope, "grant_scope_valid", "grant scope"),
            models.CheckConstraint(
                condition=Q(kind=GrantKind.TOOL) | Q(server="", pattern=""),
                name="grant_skill_has_no_tool_fields",
                violation_error_message="A skill grant names no server and no subject pattern.",
            ),
            _in("decision", GrantDecision, "grant_decision_valid", "grant decision"),
            _in("origin", GrantOrigin, "grant_origin_valid", "grant origin"),
            _approvers_valid("approvers", "grant_approvers_valid"),
            models.CheckConstraint(
                condition=Q(revoke_reason="") | Q(revoke_reason__in=RevokeReason.values),
                name="grant_revoke_reason_valid",
                violation_error_message="Unknown revoke reason.",
            ),
            models.CheckConstraint(
                condition=(
                    Q(scope=GrantScope.AGENT, session__isnull=True, turn_id="")
                    | Q(scope=GrantScope.SESSION, session__isnull=False, turn_id="")
                    | (Q(scope=GrantScope.TURN, session__isnull=False) & ~Q(turn_id=""))
                ),
                name="grant_scope_matches_holder",
                violation_error_message=(
                    "An AGENT grant has no session, a SESSION grant has a session, and a TURN "
                    "grant has a session and a turn."
                ),
            ),
            models.CheckConstraint(
                condition=Q(revoked_at__isnull=True) | ~Q(revoke_reason=""),
                name="grant_revocation_has_reason",
                violation_error_message="A revoked grant records why.",
            ),
            models.CheckConstraint(
                condition=~Q(origin=GrantOrigin.ABORT)
                | Q(decision=GrantDecision.DENY, scope=GrantScope.SESSION),
                name="grant_abort_is_session_deny",
                violation_error_message=(
                    "An unanswered request that is dismissed, cancelled or timed out only ever "
                    "denies, and only for its session, never agent-wide."
                ),
            ),
            models.UniqueConstraint(
                fields=["runtime", "kind", "server", "skill", "pattern"],
                condition=Q(scope=GrantScope.AGENT, revoked_at__isnull=True),
                name="grant_one_active_agent_grant",
                violation_error_message="This skill already has an agent-wide grant in force.",
            ),
            models.UniqueConstraint(
                fields=["session", "kind", "server", "skill", "pattern"],
                condition=Q(scope=GrantScope.SESSION, revoked_at__isnull=True),
                name="grant_one_active_session_grant",
                violation_error_message="This skill already has a session grant in force.",
            ),
            models.UniqueConstraint(
                fields=["session", "turn_id", "kind", "server", "skill", "pattern"],
                condition=Q(scope=GrantScope.TURN, revoked_at__isnull=True),
                name="grant_one_active_turn_grant",
                violation_error_message="This skill already has a grant for this turn.",
            ),
        ]
        indexes = [
            models.Index(fields=["runtime", "skill"], name="grant_runtime_skill"),
            models.Index(fields=["session", "skill"], name="grant_session_skill"),
            models.Index(fields=["runtime", "scope", "-created_at"], name="grant_runtime_scope"),
            # Decision analytics read a period's grants by the day they were written or
            # revoked; only revoked grants have a revoked_at worth indexing.
            models.Index(fields=["created_at"], name="grant_created"),
            models.Index(fields=["revoked_at"], name="grant_revoked", condition=Q(revoked_at__isnull=False)),
        ]

    def __str__(self) -> str:
        if self.kind == GrantKind.TOOL:
            name = f"{self.server}/{self.skill}" if self.server else self.skill
            return (
                f"{self.scope} {self.decision} {name}({self.pattern})"
                if self.pattern
                else f"{self.scope} {self.decision} {name}"
            )
        return f"{self.scope} {self.decision} {self.skill}"

    @property
    def label(self) -> str:
        """What the grant answers for, as pages show it: the skill, or for a tool grant the
        tool and its subject pattern as rule text, `Bash(git push:*)` (U3)."""
        if self.kind != GrantKind.TOOL:
            return self.skill
        name = f"{self.server}/{self.skill}" if self.server else self.skill
        return f"{name}({self.pattern})" if self.pattern else name


REQUEST_REASON_MAX = 2000  # the API's limit (MAX_REASON)
RULE_NOTE_MAX = 1000


class ApprovalRequest(models.Model):
    """A runtime asking a person about one or more skills (S4-S9), or about one tool call
    with its exact arguments (U2): a TOOL request has one item, named after the tool."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(
        max_length=8, choices=RequestKind.choices, default=RequestKind.SKILL, db_default=RequestKind.SKILL
    )
    runtime = models.ForeignKey(
        "runtimes.AgentRuntime", on_delete=models.PROTECT, related_name="approval_requests"
    )
    session = models.ForeignKey(
        Session, on_delete=models.PROTECT, null=True, blank=True, related_name="requests"
    )
    invoking_session = models.ForeignKey(
        Session, on_delete=models.PROTECT, null=True, blank=True, related_name="forked_requests"
    )
    turn_id = models.CharField(max_length=200, blank=True, default="")
    principal = models.CharField(
        max_length=200, blank=True, default="", help_text="Whose request it is, resolved at creation."
    )
    reason = models.TextField(blank=True, default="")
    status = models.CharField(max_length=12, choices=RequestStatus.choices, default=RequestStatus.PENDING)
    idempotency_key = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    answered_at = models.DateTimeField(null=True, blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    closed_at = models.DateTimeField(null=True, blank=True)
    # A TOOL request's call (U2, U4): which tool, its arguments as sent, their canonical
    # digest, and the subject (the value of the tool's subject argument) when there is one.
    tool = models.CharField(max_length=200, blank=True, default="", db_default="")
    server = models.CharField(max_length=100, blank=True, default="", db_default="")
    arguments = models.JSONField(null=True, blank=True)
    arguments_digest = models.CharField(max_length=71, blank=True, default="", db_default="")
    subject_argument = models.CharField(max_length=200, blank=True, default="", db_default="")
    subject = models.TextField(null=True, blank=True)
    # U4: an *Allow this call* answers ALLOW once; this marks its use.
    call_used_at = models.DateTimeField(null=True, blank=True)
    # P2: when it was sent to the operators and the owner, nobody having answered it in its
    # runtime's time (set once, by a conditional update). Not S6's escalation of an answer.
    escalated_at = models.DateTimeField(null=True, blank=True)
    # Its timeline's "woken": when the API first sent the runtime the request closed, and
    # whether that response ended a wait on it (set once, by a conditional update).
    answer_sent_at = models.DateTimeField(null=True, blank=True)
    answer_sent_to_waiter = models.BooleanField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("answer_approvalrequest", "Can answer skill approval requests (S13 decides which)")]
        constraints = [
            _in("status", RequestStatus, "request_status_valid", "request status"),
            _in("kind", RequestKind, "request_kind_valid", "request kind"),
            models.CheckConstraint(
                condition=(
                    Q(kind=RequestKind.SKILL, tool="", server="", arguments__isnull=True, arguments_digest="")
                    | (
                        Q(kind=RequestKind.TOOL, arguments__isnull=False)
                        & ~Q(tool="")
                        & ~Q(arguments_digest="")
                    )
                ),
                name="request_tool_fields_match_kind",
                violation_error_message=(
                    "A tool request names its tool, arguments and digest; a skill request none."
                ),
            ),
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("reason"), REQUEST_REASON_MAX),
                name="request_reason_length",
                violation_error_message=f"A reason is at most {REQUEST_REASON_MAX} characters.",
            ),
            models.UniqueConstraint(
                fields=["runtime", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="request_idempotency_key_unique",
                violation_error_message="This runtime already used that Idempotency-Key.",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "expires_at"], name="request_status_expiry"),
            models.Index(fields=["principal", "status", "-created_at"], name="request_principal_status"),
            models.Index(fields=["runtime", "status", "-created_at"], name="request_runtime_status"),
            # Decision analytics read a period's requests by the day they were opened.
            models.Index(fields=["created_at"], name="request_created"),
            # The inbox's "just answered by you" lines: one person's newest answers.
            models.Index(fields=["answered_by", "-answered_at"], name="request_answered_by_recent"),
        ]

    def __str__(self) -> str:
        return f"request {self.id} ({self.status})"

    @property
    def is_fork(self) -> bool:
        return self.session_id is None and self.invoking_session_id is not None


class ApprovalItem(models.Model):
    """One skill of a request, and what became of it."""

    request = models.ForeignKey(ApprovalRequest, on_delete=models.PROTECT, related_name="items")
    position = models.PositiveSmallIntegerField()
    skill = models.CharField(max_length=200)
    widest_scope = models.CharField(max_length=8, choices=GrantScope.choices, default=GrantScope.AGENT)
    decision = models.CharField(max_length=8, choices=GrantDecision.choices, blank=True, default="")
    scope = models.CharField(max_length=8, choices=ItemScope.choices, blank=True, default="")
    source = models.CharField(max_length=20, choices=ITEM_SOURCE_CHOICES, blank=True, default="")
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    answered_at = models.DateTimeField(null=True, blank=True)
    grant = models.ForeignKey(Grant, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # A TOOL item's answer at SESSION or AGENT scope: the subject pattern the approver chose
    # ("" the whole tool); CALL scope answers exactly the request's arguments.
    pattern = models.CharField(max_length=SUBJECT_PATTERN_MAX, blank=True, default="", db_default="")
    # P3: how many distinct people must allow, from the rule that asked, fixed when the request
    # opened (a later rule edit leaves an open request as it was), and how many have so far:
    # raised by one conditional UPDATE per allow, so exactly one allow sees it reach the count.
    approvers = models.PositiveSmallIntegerField(default=1, db_default=1)
    allows_given = models.PositiveSmallIntegerField(default=0, db_default=0)

    class Meta:
        ordering = ["request", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["request", "skill"],
                name="approval_item_skill_unique",
                violation_error_message="A request names each skill once.",
            ),
            models.CheckConstraint(
                condition=Q(decision="") | Q(decision__in=GrantDecision.values),
                name="approval_item_decision_valid",
                violation_error_message="Unknown decision.",
            ),
            models.CheckConstraint(
                condition=Q(scope="") | Q(scope__in=ItemScope.values),
                name="approval_item_scope_valid",
                violation_error_message="Unknown scope.",
            ),
            _in("widest_scope", GrantScope, "approval_item_widest_scope_valid", "scope"),
            _approvers_valid("approvers", "approval_item_approvers_valid"),
            models.CheckConstraint(
                condition=Q(allows_given__lte=models.F("approvers")),
                name="approval_item_allows_within_approvers",
                violation_error_message="More allows than people needed.",
            ),
            models.CheckConstraint(
                condition=Q(source="") | Q(source__in=[value for value, _ in ITEM_SOURCE_CHOICES]),
                name="approval_item_source_valid",
                violation_error_message="Unknown decision source.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.skill}: {self.decision or 'unanswered'}"

    @property
    def answered(self) -> bool:
        return bool(self.decision)

    @property
    def needs_several(self) -> bool:
        """P3: the rule that asked needs more than one person to allow."""
        return self.approvers > 1


class ApprovalAllow(models.Model):
    """P3: one person's allow of an item that needs several; the grant is written with the
    last one. Kept whatever becomes of the item (a Deny, an expiry), as the audit keeps it."""

    item = models.ForeignKey(ApprovalItem, on_delete=models.PROTECT, related_name="allow_records")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    answer = models.CharField(max_length=16, choices=Answer.choices)
    pattern = models.CharField(max_length=SUBJECT_PATTERN_MAX, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["item", "created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["item", "user"],
                name="approval_allow_once_per_person",
                violation_error_message="This person has already allowed it.",
            ),
            _in("answer", Answer, "approval_allow_answer_valid", "answer"),
        ]

    def __str__(self) -> str:
        return f"{self.item.skill}: {self.answer} by {self.user_id}"


class SkillRule(models.Model):
    """An operator's rule for skills matching a pattern: ALLOW, DENY or ASK, and the
    widest scope an answer may take (so "always" can be forbidden for dangerous skills)."""

    runtime = models.ForeignKey(
        "runtimes.AgentRuntime",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="skill_rules",
        help_text="Empty: every runtime.",
    )
    pattern = models.CharField(max_length=200, help_text="A skill name, or a glob such as deploy-*.")
    action = models.CharField(max_length=8, choices=RuleAction.choices)
    widest_scope = models.CharField(max_length=8, choices=GrantScope.choices, default=GrantScope.AGENT)
    approvers = models.PositiveSmallIntegerField(
        default=1, db_default=1, help_text="People who must allow what this rule asks about (P3)."
    )
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pattern", "id"]
        constraints = [
            _in("action", RuleAction, "rule_action_valid", "rule action"),
            _in("widest_scope", GrantScope, "rule_widest_scope_valid", "scope"),
            _approvers_valid("approvers", "rule_approvers_valid"),
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("note"), RULE_NOTE_MAX),
                name="rule_note_length",
                violation_error_message=f"A note is at most {RULE_NOTE_MAX} characters.",
            ),
            models.UniqueConstraint(
                fields=["runtime", "pattern"],
                condition=Q(runtime__isnull=False),
                name="rule_pattern_unique_per_runtime",
                violation_error_message="A rule for this pattern already exists for this runtime.",
            ),
            models.UniqueConstraint(
                fields=["pattern"],
                condition=Q(runtime__isnull=True),
                name="rule_pattern_unique_global",
                violation_error_message="A rule for this pattern already exists for every runtime.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pattern} → {self.action}"


class ToolRule(models.Model):
    """An operator's argument rule `Tool(pattern)` (U1): ALLOW, ASK or DENY for calls of one
    tool whose subject matches the pattern ("" the whole tool). `unattended` limits an ALLOW
    to one runtime's unattended runs: a pre-approval (U5)."""

    runtime = models.ForeignKey(
        "runtimes.AgentRuntime",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="tool_rules",
        help_text="Empty: every runtime.",
    )
    server = models.CharField(
        max_length=100, blank=True, default="", help_text="Empty: a runtime's own tool."
    )
    tool = models.CharField(max_length=200)
    pattern = models.CharField(max_length=SUBJECT_PATTERN_MAX, blank=True, default="")
    action = models.CharField(max_length=8, choices=RuleAction.choices)
    unattended = models.BooleanField(default=False)
    approvers = models.PositiveSmallIntegerField(
        default=1, db_default=1, help_text="People who must allow what this rule asks about (P3)."
    )
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["server", "tool", "pattern", "id"]
        constraints = [
            _in("action", RuleAction, "tool_rule_action_valid", "rule action"),
            _approvers_valid("approvers", "tool_rule_approvers_valid"),
            models.CheckConstraint(
                condition=~Q(tool=""),
                name="tool_rule_tool_name_valid",
                violation_error_message="A tool rule names its tool.",
            ),
            models.CheckConstraint(
                condition=Q(unattended=False) | Q(action=RuleAction.ALLOW, runtime__isnull=False),
                name="tool_rule_pre_approval_is_runtime_allow",
                violation_error_message="A pre-approval is an ALLOW for one runtime's unattended runs.",
            ),
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("note"), RULE_NOTE_MAX),
                name="tool_rule_note_length",
                violation_error_message=f"A note is at most {RULE_NOTE_MAX} characters.",
            ),
            models.UniqueConstraint(
                fields=["runtime", "server", "tool", "pattern", "unattended"],
                condition=Q(runtime__isnull=False),
                name="tool_rule_unique_per_runtime",
                violation_error_message="This runtime already has a rule for that tool and pattern.",
            ),
            models.UniqueConstraint(
                fields=["server", "tool", "pattern", "unattended"],
                condition=Q(runtime__isnull=True),
                name="tool_rule_unique_global",
                violation_error_message="A rule for that tool and pattern already exists for every runtime.",
            ),
        ]

    def __str__(self) -> str:
        name = f"{self.server}/{self.tool}" if self.server else self.tool
        text = f"{name}({self.pattern})" if self.pattern else name
        return f"{text} → {self.action}"


class RuleSetVersion(models.Model):
    """A counter bumped with every rule change, so each process knows when its cached
    rule index is stale, whichever node made the change."""

    version = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"rules v{self.version}"


class RequestView(models.Model):
    """Who opened a request's page, and when first (its timeline's "viewed"): one row per
    person and request, written by the page's GET with one INSERT that a second visit leaves
    as it was. A view answers nothing and changes nothing of the request (P1)."""

    request = models.ForeignKey(ApprovalRequest, on_delete=models.PROTECT, related_name="views")
    viewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    viewed_at = models.DateTimeField()

    class Meta:
        ordering = ["request", "viewed_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["request", "viewer"],
                name="request_view_once_per_person",
                violation_error_message="This person's first view of this request is already recorded.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.viewer_id} viewed {self.request_id} at {self.viewed_at:%Y-%m-%d %H:%M:%S}"
