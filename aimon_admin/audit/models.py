"""The append-only, hash-chained audit log (A1-A3).

Rows are written only by `aimon_admin.audit.services.audit_record`. Every layer refuses
to change or remove one: the model, its queryset, the admin, and a database trigger.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, NoReturn

from django.conf import settings
from django.db import models
from django.db.models import ExpressionWrapper, F
from django.db.models.fields.json import KT

from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.core.context import Channel

APPEND_ONLY_MESSAGE = "Audit events are append-only: they are never changed or deleted."


class AppendOnlyError(Exception):
    """Raised when code tries to change or delete an audit event."""


class AuditEventQuerySet(models.QuerySet):
    def update(self, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError(APPEND_ONLY_MESSAGE)

    def delete(self) -> NoReturn:
        raise AppendOnlyError(APPEND_ONLY_MESSAGE)

    def bulk_create(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError("Audit events are written one by one, by audit_record().")

    def bulk_update(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError(APPEND_ONLY_MESSAGE)


def _choices_check(field: str, choices: type[models.TextChoices]) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=models.Q(**{f"{field}__in": choices.values}),
        name=f"audit_event_{field}_valid",
        violation_error_message=f"Unknown audit {field}.",
    )


class AuditEvent(models.Model):
    seq = models.BigIntegerField(unique=True, editable=False)
    created_at = models.DateTimeField(editable=False, db_index=True)
    # PROTECT, not SET_NULL: nulling the actor would be an UPDATE of an audit row, which
    # the trigger refuses. People who leave are deactivated, never deleted.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_constraint=True,
    )
    actor_label = models.CharField(max_length=200)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    action = models.CharField(max_length=48, choices=AuditAction.choices)
    level = models.CharField(max_length=8, choices=AuditLevel.choices, default=AuditLevel.INFO)
    runtime = models.ForeignKey(
        "runtimes.AgentRuntime", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    session_key = models.CharField(max_length=200, blank=True, default="")
    subject_type = models.CharField(max_length=32, blank=True, default="")
    subject = models.CharField(max_length=300, blank=True, default="")
    details = models.JSONField(default=dict, blank=True)
    request_id = models.CharField(max_length=80, blank=True, default="")
    prev_hash = models.CharField(max_length=64, unique=True, editable=False)
    hash = models.CharField(max_length=64, unique=True, editable=False)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-seq"]
        constraints = [
            _choices_check("action", AuditAction),
            _choices_check("level", AuditLevel),
            _choices_check("channel", Channel),
            models.CheckConstraint(condition=models.Q(seq__gte=1), name="audit_event_seq_positive"),
        ]
        # One per log filter, each ending in seq: "filter X ORDER BY seq DESC LIMIT 51" is one
        # index range however long the log (aimon_admin/audit_pages/selectors.py).
        indexes = [
            models.Index(fields=["action", "-seq"], name="audit_action_seq"),
            models.Index(fields=["runtime", "-seq"], name="audit_runtime_seq"),
            models.Index(fields=["level", "-seq"], name="audit_level_seq"),
            models.Index(fields=["actor_label", "-seq"], name="audit_actor_label_seq"),
            models.Index(fields=["session_key", "-seq"], name="audit_session_seq"),
            models.Index(fields=["subject", "-seq"], name="audit_subject_seq"),
            # The subject filter also matches a skill named in the details: the expression
            # is selectors.DETAIL_SKILL's.
            models.Index(
                ExpressionWrapper(KT("details__skill"), output_field=models.TextField()),
                F("seq").desc(),
                name="audit_detail_skill_seq",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.action} by {self.actor_label}"

    # Set only by audit_record(), so no other code path can insert a row.
    _written_by_audit_record = False

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding or not self._written_by_audit_record:
            raise AppendOnlyError("Audit events are written only by audit_record().")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError(APPEND_ONLY_MESSAGE)

    def content(self) -> dict[str, Any]:
        """The event's hashed content (see aimon_admin.audit.chain)."""
        return {
            "seq": self.seq,
            "created_at": format_timestamp(self.created_at),
            "actor_id": self.actor_id,
            "actor_label": self.actor_label,
            "channel": self.channel,
            "action": self.action,
            "level": self.level,
            "runtime_id": self.runtime_id,
            "session_key": self.session_key,
            "subject_type": self.subject_type,
            "subject": self.subject,
            "details": self.details,
            "request_id": self.request_id,
            "prev_hash": self.prev_hash,
        }


def format_timestamp(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat(timespec="microseconds")


class AuditTreeNode(models.Model):
    """A complete subtree of the log's Merkle tree (A4): covers leaves [index * 2**level,
    (index + 1) * 2**level), leaf i being event seq i + 1. Written only with its event, by
    aimon_admin.audit.tree; append-only as the events are."""

    pk = models.CompositePrimaryKey("level", "position")
    level = models.SmallIntegerField()
    position = models.BigIntegerField()
    hash = models.BinaryField(max_length=32)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(level__gte=0, position__gte=0), name="audit_tree_node_in_tree"
            )
        ]

    def __str__(self) -> str:
        return f"tree node ({self.level}, {self.position})"


class AuditCheckpoint(models.Model):
    """A signed checkpoint of the tree (A4), as published: `document` is the JSON written out
    (aimon_admin.audit.checkpoints). Kept here to chain the next one to it and to show it;
    the copies that count are the ones published outside the database."""

    tree_size = models.BigIntegerField()
    root_hash = models.CharField(max_length=64)
    signed_at = models.DateTimeField(db_index=True)
    key_id = models.CharField(max_length=16)
    checkpoint_hash = models.CharField(max_length=64, unique=True)
    document = models.JSONField()
    published_to = models.TextField(blank=True, default="")
    publish_problem = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-signed_at", "-pk"]

    def __str__(self) -> str:
        return f"checkpoint of {self.tree_size} events at {self.signed_at:%Y-%m-%d %H:%M:%S}"
