"""Enums of the runtimes app."""

from __future__ import annotations

from django.db import models

from aimon_admin.core import words


class EnforcementPoint(models.TextChoices):
    """G1-G3: which of the product's enforcement points made a runtime's call, told by the
    first product token of its User-Agent; any other caller is OTHER."""

    CLIENT = "CLIENT", "Runtime client library"
    GATEWAY = "GATEWAY", "MCP gateway"
    CLAUDE_HOOK = "CLAUDE_HOOK", "Claude Code hook"
    OTHER = "OTHER", "Other caller"


words.register("enforcement-point", EnforcementPoint)
