from __future__ import annotations

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "aimon_admin.approvals"
    label = "approvals"
    verbose_name = "Skill approvals"

    def ready(self) -> None:
        from aimon_admin.approvals import checks  # noqa: F401 - registers the start-up checks
