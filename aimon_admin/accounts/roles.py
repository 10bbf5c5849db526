"""The three kinds of people who use AIMON Admin, as groups with permissions."""

from __future__ import annotations

from django.db import models


class Role(models.TextChoices):
    OPERATOR = "operator", "Operator"
    APPROVER = "approver", "Approver"
    AUDITOR = "auditor", "Auditor"


# What each role's group is granted. Views check these permissions, never group names.
ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    Role.OPERATOR: (
        "runtimes.view_agentruntime",
        "runtimes.add_agentruntime",
        "runtimes.change_agentruntime",
        "runtimes.view_runtimetoken",
        "runtimes.add_runtimetoken",
        "runtimes.change_runtimetoken",
        "registry.view_tool",
        "registry.change_tool",
        "registry.view_mcpserver",
        "registry.add_mcpserver",
        "registry.change_mcpserver",
        "approvals.answer_approvalrequest",
        "approvals.view_skillrule",
        "approvals.add_skillrule",
        "approvals.change_skillrule",
        "approvals.delete_skillrule",
        "approvals.view_toolrule",
        "approvals.add_toolrule",
        "approvals.change_toolrule",
        "approvals.delete_toolrule",
        # Organisation-wide webhooks, and the whole delivery log.
        "notifications.change_channel",
        "notifications.view_delivery",
        "audit.view_auditevent",
        # The administration pages: people, their roles and access, locked sign-ins.
        "accounts.view_user",
        "accounts.add_user",
        "accounts.change_user",
    ),
    Role.APPROVER: ("approvals.answer_approvalrequest",),
    Role.AUDITOR: (
        "runtimes.view_agentruntime",
        "runtimes.view_runtimetoken",
        "registry.view_tool",
        "registry.view_mcpserver",
        "approvals.view_skillrule",
        "approvals.view_toolrule",
        "audit.view_auditevent",
        "notifications.view_delivery",
    ),
}
