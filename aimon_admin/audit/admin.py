"""The audit log in Django's admin: read-only, like everywhere else."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from aimon_admin.audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["seq", "created_at", "action", "level", "actor_label", "runtime", "subject"]
    list_filter = ["action", "level", "channel"]
    search_fields = ["actor_label", "subject", "session_key", "request_id"]
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
