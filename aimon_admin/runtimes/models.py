"""Agent runtimes (AIMON instances) and the bearer tokens they call the API with."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models.functions import Length
from django.db.models.lookups import LessThanOrEqual

from aimon_admin.core.choices import SideEffectLevel
from aimon_admin.runtimes.choices import EnforcementPoint

RUNTIME_NAME_VALIDATOR = RegexValidator(
    r"^[a-z0-9][a-z0-9._-]{0,99}$",
    "Use 1-100 lower-case letters, digits, dots, dashes or underscores, starting with a letter or digit.",
)


RUNTIME_DESCRIPTION_MAX = 2000
# P2: how long a request may wait unanswered before it is sent to the operators and the
# runtime's owner; from a minute to a day (the longest a request may wait at all).
ESCALATE_AFTER_MIN_SECONDS = 60
ESCALATE_AFTER_MAX_SECONDS = 86400


class AgentRuntime(models.Model):
    """One agent runtime: its ceiling (T6) and its approval gate threshold (T7).

    Never deleted: its sessions, grants and audit events name it. An operator may disable it
    (`is_active` False: its tokens are refused until it is enabled again) or retire it
    (`retired_at` set: disabled for good, its tokens revoked, its settings frozen).
    """

    name = models.CharField(max_length=100, unique=True, validators=[RUNTIME_NAME_VALIDATOR])
    description = models.TextField(blank=True, default="")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="owned_runtimes",
        help_text="The person who may grant agent-wide approvals for this runtime.",
    )
    ceiling = models.CharField(
        max_length=16,
        choices=SideEffectLevel.choices,
        default=SideEffectLevel.MUTATING,
        help_text="Tools above this level are hidden from the model and refused.",
    )
    exempt_at_or_below = models.CharField(
        max_length=16,
        choices=SideEffectLevel.choices,
        default=SideEffectLevel.READ_ONLY,
        help_text=(
            "Permitted tools at or below this level run without a question, except "
            "destructive ones, which always ask."
        ),
    )
    escalate_after_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=(
            "A request still unanswered this long is sent to the operators and the runtime's "
            "owner, through their channels. Empty: never."
        ),
    )
    is_active = models.BooleanField(default=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    retired_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(retired_at__isnull=True) | models.Q(is_active=False),
                name="runtime_retired_is_inactive",
                violation_error_message="A retired runtime cannot be active.",
            ),
            models.CheckConstraint(
                condition=models.Q(retired_by__isnull=True) | models.Q(retired_at__isnull=False),
                name="runtime_retired_by_needs_retired_at",
                violation_error_message="A runtime can only name who retired it once it is retired.",
            ),
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("description"), RUNTIME_DESCRIPTION_MAX),
                name="runtime_description_length",
                violation_error_message=f"A description is at most {RUNTIME_DESCRIPTION_MAX} characters.",
            ),
            models.CheckConstraint(
                condition=models.Q(ceiling__in=SideEffectLevel.values),
                name="runtime_ceiling_valid",
                violation_error_message="Ceiling must be READ_ONLY or MUTATING.",
            ),
            models.CheckConstraint(
                condition=models.Q(exempt_at_or_below__in=SideEffectLevel.values),
                name="runtime_exempt_at_or_below_valid",
                violation_error_message="The gate threshold must be READ_ONLY or MUTATING.",
            ),
            models.CheckConstraint(
                condition=models.Q(escalate_after_seconds__isnull=True)
                | models.Q(
                    escalate_after_seconds__gte=ESCALATE_AFTER_MIN_SECONDS,
                    escalate_after_seconds__lte=ESCALATE_AFTER_MAX_SECONDS,
                ),
                name="runtime_escalate_after_bounds",
                violation_error_message=(
                    f"Sending to operators comes after {ESCALATE_AFTER_MIN_SECONDS} seconds at the "
                    f"earliest and {ESCALATE_AFTER_MAX_SECONDS} seconds (a day) at the latest."
                ),
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_retired(self) -> bool:
        return self.retired_at is not None


class RuntimeTokenQuerySet(models.QuerySet):
    def active(self) -> RuntimeTokenQuerySet:
        return self.filter(revoked_at__isnull=True)


class RuntimeToken(models.Model):
    """A bearer token naming one runtime. Only a SHA-256 of the token is stored."""

    runtime = models.ForeignKey(AgentRuntime, on_delete=models.PROTECT, related_name="tokens")
    label = models.CharField(max_length=100, blank=True, default="")
    prefix = models.CharField(max_length=16, help_text="The token's first characters, to tell it apart.")
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    objects = RuntimeTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(revoked_by__isnull=True) | models.Q(revoked_at__isnull=False),
                name="runtime_token_revoked_by_needs_revoked_at",
                violation_error_message="A token can only name who revoked it once it is revoked.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.runtime.name})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


# The product token kept of a caller's User-Agent ("aimon-gateway/0.1.0"), at most this long.
CALLER_PRODUCT_MAX = 100


class EnforcementPointCall(models.Model):
    """When an enforcement point (G1-G3) last called with this runtime's tokens: one row per
    runtime and point, kept to the minute (a reading, not a change: never audited).

    `product` is the first product token of the caller's User-Agent as validated
    (`enforcement.caller_of`), so an operator sees the version, or which other program it
    was; empty when the header had none worth keeping.
    """

    runtime = models.ForeignKey(AgentRuntime, on_delete=models.CASCADE, related_name="point_calls")
    point = models.CharField(max_length=16, choices=EnforcementPoint.choices)
    product = models.CharField(max_length=CALLER_PRODUCT_MAX, blank=True, default="")
    last_called_at = models.DateTimeField()

    class Meta:
        ordering = ["runtime", "point"]
        constraints = [
            models.UniqueConstraint(fields=["runtime", "point"], name="enforcement_point_call_once"),
            models.CheckConstraint(
                condition=models.Q(point__in=EnforcementPoint.values),
                name="enforcement_point_call_point_valid",
                violation_error_message="The point must be CLIENT, GATEWAY, CLAUDE_HOOK or OTHER.",
            ),
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("product"), CALLER_PRODUCT_MAX),
                name="enforcement_point_call_product_length",
                violation_error_message=f"A caller's product is at most {CALLER_PRODUCT_MAX} characters.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.runtime_id}: {self.point} at {self.last_called_at:%Y-%m-%d %H:%M}"
