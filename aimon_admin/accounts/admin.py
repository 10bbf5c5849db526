from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin

from aimon_admin.accounts.models import User


@admin.register(User)
class AimonUserAdmin(UserAdmin):
    """Read-only: people are created and changed through audited services and commands."""

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False
