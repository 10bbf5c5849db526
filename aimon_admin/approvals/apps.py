from __future__ import annotations

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "aimon_admin.approvals"
    label = "approvals"
    verbose_name = "Skill approvals"

    def ready(self) -> None:
        from aimon_admin.approvals import checks  # noqa: F401 - registers the start-up checks
        from aimon_admin.approvals import home as approvals_home
        from aimon_admin.approvals import metrics as approvals_metrics
        from aimon_admin.approvals.tool_rules import unattended_allow_rules, unattended_allow_rules_many
        from aimon_admin.core import home as home_sections
        from aimon_admin.core import metrics
        from aimon_admin.registry.extensions import provide_unattended_rules

        # The gate simulator and worklist show which unattended calls rules answer (U5).
        provide_unattended_rules(unattended_allow_rules, many=unattended_allow_rules_many)
        # The home's Requests section, and the escalated grants of its Audit section.
        home_sections.provide(
            "approvals:requests", approvals_home.requests_section, order=approvals_home.REQUESTS_ORDER
        )
        home_sections.provide(
            "approvals:escalations",
            approvals_home.escalations_section,
            order=approvals_home.ESCALATIONS_ORDER,
        )
        # The requests waiting now, read at every scrape of /metrics.
        metrics.at_scrape(approvals_metrics.pending_requests)
