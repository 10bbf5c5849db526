"""Enums shared by more than one app, kept at the bottom layer so no app imports sideways for them."""

from __future__ import annotations

from django.db import models

from aimon_admin.core import words


class SideEffectLevel(models.TextChoices):
    """T1: a ladder of exactly two rungs, READ_ONLY < MUTATING."""

    READ_ONLY = "READ_ONLY", "Read-only"
    MUTATING = "MUTATING", "Writes"


# The three axes of a tool read alike ("level": registry adds the other two), in a level badge.
words.register("level", SideEffectLevel, badge="level")
