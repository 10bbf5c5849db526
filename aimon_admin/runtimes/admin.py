from __future__ import annotations

from django.contrib import admin

from aimon_admin.runtimes.models import AgentRuntime


@admin.register(AgentRuntime)
class AgentRuntimeAdmin(admin.ModelAdmin):
    """Read-only here: changes go through the operator pages, which audit them."""

    list_display = ["name", "ceiling", "exempt_at_or_below", "owner", "is_active"]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False
