from __future__ import annotations

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "aimon_admin.approvals"
    label = "approvals"
    verbose_name = "Skill approvals"
