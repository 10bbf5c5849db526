"""The tool side-effect axes (DESIGN T1-T3), as stored in the database, API and audit."""

from __future__ import annotations

from django.db import models


class SideEffectLevel(models.TextChoices):
    """T1: a ladder of exactly two rungs, READ_ONLY < MUTATING."""

    READ_ONLY = "READ_ONLY", "Read-only"
    MUTATING = "MUTATING", "Mutating"


class DestructiveBehavior(models.TextChoices):
    """T2: an unordered trait; undeclared means DESTRUCTIVE."""

    NON_DESTRUCTIVE = "NON_DESTRUCTIVE", "Non-destructive"
    DESTRUCTIVE = "DESTRUCTIVE", "Destructive"


class IdempotencyBehavior(models.TextChoices):
    """T3: retry advice only; no gate reads it."""

    IDEMPOTENT = "IDEMPOTENT", "Idempotent"
    NON_IDEMPOTENT = "NON_IDEMPOTENT", "Non-idempotent"
