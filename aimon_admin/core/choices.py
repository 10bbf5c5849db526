"""Enums shared by more than one app, kept at the bottom layer so no app imports sideways for them."""

from __future__ import annotations

from django.db import models


class SideEffectLevel(models.TextChoices):
    """T1: a ladder of exactly two rungs, READ_ONLY < MUTATING."""

    READ_ONLY = "READ_ONLY", "Read-only"
    MUTATING = "MUTATING", "Mutating"
