"""LOGIN_LOCKED_OUT and LOGIN_UNLOCKED (sign-in lockout).

On SQLite, replacing the action check constraint rebuilds the table, and the rebuild keeps
only the indexes in the model state: the log-filter indexes 0005 made outside the state
would be lost, so the last operation makes any that are missing again (on PostgreSQL
nothing is missing and it does nothing).
"""

import importlib

from django.conf import settings
from django.db import migrations, models


def restore_filter_indexes(apps, schema_editor):  # type: ignore[no-untyped-def]
    earlier = importlib.import_module("aimon_admin.audit.migrations.0005_log_filter_indexes")
    model = apps.get_model("audit", "AuditEvent")
    with schema_editor.connection.cursor() as cursor:
        existing = set(schema_editor.connection.introspection.get_constraints(cursor, model._meta.db_table))
    for index in earlier.INDEXES:
        if index.name not in existing:
            schema_editor.add_index(model, index)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0005_log_filter_indexes"),
        ("runtimes", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # Run last when the migration is reversed: the rebuild back to 0005's constraint.
        migrations.RunPython(migrations.RunPython.noop, restore_filter_indexes, elidable=False),
        migrations.RemoveConstraint(
            model_name="auditevent",
            name="audit_event_action_valid",
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="action",
            field=models.CharField(
                choices=[
                    ("USER_CREATED", "User created"),
                    ("USER_ROLES_CHANGED", "User roles changed"),
                    ("USER_PASSWORD_CHANGED", "User password changed"),
                    ("LOGIN_SUCCEEDED", "Login succeeded"),
                    ("LOGIN_FAILED", "Login failed"),
                    ("LOGIN_LOCKED_OUT", "Sign-in locked out after repeated failures"),
                    ("LOGIN_UNLOCKED", "Sign-in lockout cleared by an operator"),
                    ("LOGOUT", "Logout"),
                    ("RUNTIME_CREATED", "Runtime created"),
                    ("RUNTIME_SETTINGS_CHANGED", "Runtime settings changed"),
                    ("TOKEN_ISSUED", "Runtime token issued"),
                    ("TOKEN_REVOKED", "Runtime token revoked"),
                    ("LOCAL_TOOLS_REPLACED", "Runtime's local tool catalog replaced"),
                    ("MCP_SERVER_CREATED", "MCP server created"),
                    ("MCP_SERVER_CHANGED", "MCP server settings changed"),
                    ("MCP_TRUST_CHANGED", "MCP annotation trust changed"),
                    ("MCP_SYNC_REQUESTED", "MCP sync requested"),
                    ("MCP_SYNC_SUCCEEDED", "MCP sync succeeded"),
                    ("MCP_SYNC_FAILED", "MCP sync failed"),
                    ("MCP_TOOLS_RELAYED", "MCP tool list relayed by a runtime"),
                    ("MCP_TOOLS_REGISTERED", "MCP tools registered, back, or gone absent"),
                    ("TOOL_DEFINITION_CHANGED", "Tool definition changed"),
                    ("TOOL_DEFINITION_ACCEPTED", "Changed tool definition accepted"),
                    ("TOOL_REVIEW_RECORDED", "Tool review finding recorded"),
                    ("CONFIG_LOADED", "Configuration file loaded"),
                    ("SKILL_GRANTED", "Skill approval granted"),
                    ("SKILL_GRANT_ESCALATED", "Session answer escalated to agent-wide"),
                    ("SKILL_ABORT_DENIED", "Unanswered skill denied on abort"),
                    ("SESSION_CLEARED", "Session approvals cleared"),
                    ("SESSION_REVOKED", "Session approvals revoked"),
                    ("AGENT_GRANTS_REVOKED", "Agent-wide approvals revoked"),
                    ("GRANT_REVOKED", "Single approval revoked"),
                    ("SESSION_EXPIRED", "Idle session's approvals expired"),
                    ("RULE_CREATED", "Skill rule created"),
                    ("RULE_CHANGED", "Skill rule changed"),
                    ("RULE_DELETED", "Skill rule deleted"),
                    ("AUDIT_CHAIN_VERIFIED", "Audit chain verified"),
                    ("AUDIT_CHAIN_BROKEN", "Audit chain found broken"),
                ],
                max_length=48,
            ),
        ),
        migrations.AddConstraint(
            model_name="auditevent",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "action__in",
                        [
                            "USER_CREATED",
                            "USER_ROLES_CHANGED",
                            "USER_PASSWORD_CHANGED",
                            "LOGIN_SUCCEEDED",
                            "LOGIN_FAILED",
                            "LOGIN_LOCKED_OUT",
                            "LOGIN_UNLOCKED",
                            "LOGOUT",
                            "RUNTIME_CREATED",
                            "RUNTIME_SETTINGS_CHANGED",
                            "TOKEN_ISSUED",
                            "TOKEN_REVOKED",
                            "LOCAL_TOOLS_REPLACED",
                            "MCP_SERVER_CREATED",
                            "MCP_SERVER_CHANGED",
                            "MCP_TRUST_CHANGED",
                            "MCP_SYNC_REQUESTED",
                            "MCP_SYNC_SUCCEEDED",
                            "MCP_SYNC_FAILED",
                            "MCP_TOOLS_RELAYED",
                            "MCP_TOOLS_REGISTERED",
                            "TOOL_DEFINITION_CHANGED",
                            "TOOL_DEFINITION_ACCEPTED",
                            "TOOL_REVIEW_RECORDED",
                            "CONFIG_LOADED",
                            "SKILL_GRANTED",
                            "SKILL_GRANT_ESCALATED",
                            "SKILL_ABORT_DENIED",
                            "SESSION_CLEARED",
                            "SESSION_REVOKED",
                            "AGENT_GRANTS_REVOKED",
                            "GRANT_REVOKED",
                            "SESSION_EXPIRED",
                            "RULE_CREATED",
                            "RULE_CHANGED",
                            "RULE_DELETED",
                            "AUDIT_CHAIN_VERIFIED",
                            "AUDIT_CHAIN_BROKEN",
                        ],
                    )
                ),
                name="audit_event_action_valid",
                violation_error_message="Unknown audit action.",
            ),
        ),
        migrations.RunPython(restore_filter_indexes, migrations.RunPython.noop, elidable=False),
    ]
