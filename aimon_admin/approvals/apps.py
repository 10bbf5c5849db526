from __future__ import annotations

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "aimon_admin.approvals"
    label = "approvals"
    verbose_name = "Skill approvals"

    def ready(self) -> None:
        from aimon_admin.approvals import checks  # noqa: F401 - registers the start-up checks
        from aimon_admin.approvals.tool_rules import unattended_allow_rules
        from aimon_admin.registry.extensions import provide_unattended_rules

        # The gate simulator and worklist show which unattended calls rules answer (U5).
        provide_unattended_rules(unattended_allow_rules)
