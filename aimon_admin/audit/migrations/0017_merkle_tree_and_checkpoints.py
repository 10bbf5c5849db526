"""The log as a Merkle tree and its signed checkpoints (A4): the tables, the tree's append
function (aimon_admin/audit/tree.py) and append-only triggers (audit/triggers.py), the tree
of the events written before, built in seq order; and the key rotation action (on SQLite the
action's new choices rebuild the events' table, which drops the log filter indexes: they are
restored as 0016 restores them)."""

import importlib

from django.conf import settings
from django.db import migrations, models


def install_and_build(apps, schema_editor):  # type: ignore[no-untyped-def]
    from aimon_admin.audit import tree, triggers

    tree.install(schema_editor.connection)
    triggers.install(schema_editor.connection)
    tree.rebuild(apps.get_model("audit", "AuditEvent"), apps.get_model("audit", "AuditTreeNode"))


def restore_filter_indexes(apps, schema_editor):  # type: ignore[no-untyped-def]
    earlier = importlib.import_module("aimon_admin.audit.migrations.0016_restore_filter_indexes")
    earlier.restore_filter_indexes(apps, schema_editor)


def drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    from aimon_admin.audit import tree, triggers

    tree.drop(schema_editor.connection)
    triggers.drop(schema_editor.connection, tables=(triggers.TREE_TABLE,))


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0016_restore_filter_indexes"),
        ("runtimes", "0006_enforcement_point_calls"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditCheckpoint",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("tree_size", models.BigIntegerField()),
                ("root_hash", models.CharField(max_length=64)),
                ("signed_at", models.DateTimeField(db_index=True)),
                ("key_id", models.CharField(max_length=16)),
                ("checkpoint_hash", models.CharField(max_length=64, unique=True)),
                ("document", models.JSONField()),
                ("published_to", models.TextField(blank=True, default="")),
                ("publish_problem", models.TextField(blank=True, default="")),
            ],
            options={
                "ordering": ["-signed_at", "-pk"],
            },
        ),
        migrations.CreateModel(
            name="AuditTreeNode",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "level", "position", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("level", models.SmallIntegerField()),
                ("position", models.BigIntegerField()),
                ("hash", models.BinaryField(max_length=32)),
            ],
        ),
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
                    ("USER_DEACTIVATED", "Person deactivated"),
                    ("USER_REACTIVATED", "Person reactivated"),
                    ("USER_PASSWORD_LINK_ISSUED", "Set-password link made for a person"),
                    ("RUNTIME_CREATED", "Runtime created"),
                    ("RUNTIME_SETTINGS_CHANGED", "Runtime settings changed"),
                    ("RUNTIME_DISABLED", "Runtime disabled (its tokens refused)"),
                    ("RUNTIME_ENABLED", "Runtime enabled again"),
                    ("RUNTIME_RETIRED", "Runtime retired for good (its tokens revoked)"),
                    ("TOKEN_ISSUED", "Runtime token issued"),
                    ("TOKEN_REVOKED", "Runtime token revoked"),
                    ("LOCAL_TOOLS_REPLACED", "Runtime's local tool catalog replaced"),
                    ("MCP_SERVER_CREATED", "MCP server created"),
                    ("MCP_SERVER_CHANGED", "MCP server settings changed"),
                    ("MCP_SERVER_RETIRED", "MCP server retired for good"),
                    ("MCP_TRUST_CHANGED", "MCP annotation trust changed"),
                    ("MCP_SYNC_REQUESTED", "MCP sync requested"),
                    ("MCP_SYNC_SUCCEEDED", "MCP sync succeeded"),
                    ("MCP_SYNC_FAILED", "MCP sync failed"),
                    ("MCP_TOOLS_RELAYED", "MCP tool list relayed by a runtime"),
                    ("MCP_TOOLS_REGISTERED", "MCP tools registered, back, or gone absent"),
                    ("TOOL_DEFINITION_CHANGED", "Tool definition changed"),
                    ("TOOL_DEFINITION_ACCEPTED", "Changed tool definition accepted"),
                    ("TOOL_REVIEW_RECORDED", "Tool review finding recorded"),
                    ("RELAY_FINDING_RECORDED", "A runtime relayed a tool differently (finding kept)"),
                    ("RELAY_FINDING_ACCEPTED", "Relay finding accepted as the served definition"),
                    ("RELAY_FINDING_DISMISSED", "Relay finding dismissed"),
                    ("CONFIG_LOADED", "Configuration file loaded"),
                    ("SKILL_GRANTED", "Skill approval granted"),
                    ("SKILL_GRANT_ESCALATED", "Session answer escalated to agent-wide"),
                    ("SKILL_ABORT_DENIED", "Unanswered skill denied on abort"),
                    ("SKILL_REQUEST_DENIED", "Skill denied for one request only (nothing stored)"),
                    ("SKILL_ANSWER_SETTLED", "Answer settled by a grant another answer had just written"),
                    ("APPROVAL_ALLOW_RECORDED", "One person's allow recorded (several must allow)"),
                    ("SESSION_CLEARED", "Session approvals cleared"),
                    ("SESSION_REVOKED", "Session approvals revoked"),
                    ("AGENT_GRANTS_REVOKED", "Agent-wide approvals revoked"),
                    ("GRANT_REVOKED", "Single approval revoked"),
                    ("SESSION_EXPIRED", "Idle session's approvals expired"),
                    ("RULE_CREATED", "Skill rule created"),
                    ("RULE_CHANGED", "Skill rule changed"),
                    ("RULE_DELETED", "Skill rule deleted"),
                    ("TOOL_RULE_CREATED", "Tool rule created"),
                    ("TOOL_RULE_CHANGED", "Tool rule changed"),
                    ("TOOL_RULE_DELETED", "Tool rule deleted"),
                    ("TOOL_SUBJECT_SET", "Tool's subject argument set"),
                    ("TOOL_GRANTED", "Tool approval granted for a subject pattern"),
                    ("TOOL_CALL_APPROVED", "One tool call approved, bound to its arguments' digest"),
                    ("TOOL_CALL_APPROVAL_USED", "An approved tool call was used"),
                    ("TOOL_ABORT_DENIED", "Unanswered tool call denied on abort"),
                    ("TOOL_ANSWER_SETTLED", "Tool answer settled by a grant another answer had just written"),
                    ("REQUEST_ESCALATED", "Unanswered request sent to operators"),
                    ("NOTIFICATION_CHANNEL_ADDED", "Notification channel added"),
                    ("NOTIFICATION_CHANNEL_REMOVED", "Notification channel removed"),
                    ("NOTIFICATION_PREFERENCES_CHANGED", "Notification digest or quiet hours changed"),
                    ("WEBHOOK_SECRET_ROTATED", "Webhook signing secret rotated"),
                    (
                        "NOTIFICATION_CHANNEL_BROKEN",
                        "Notification channel marked broken after failing repeatedly",
                    ),
                    ("NOTIFICATION_CHANNEL_MENDED", "Broken notification channel works again"),
                    ("NOTIFICATION_GAVE_UP", "Notification given up: not delivered to a channel"),
                    ("AUDIT_CHAIN_VERIFIED", "Audit chain verified"),
                    ("AUDIT_CHAIN_BROKEN", "Audit chain found broken"),
                    ("AUDIT_SIGNING_KEY_ROTATED", "Audit checkpoint signing key rotated"),
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
                            "USER_DEACTIVATED",
                            "USER_REACTIVATED",
                            "USER_PASSWORD_LINK_ISSUED",
                            "RUNTIME_CREATED",
                            "RUNTIME_SETTINGS_CHANGED",
                            "RUNTIME_DISABLED",
                            "RUNTIME_ENABLED",
                            "RUNTIME_RETIRED",
                            "TOKEN_ISSUED",
                            "TOKEN_REVOKED",
                            "LOCAL_TOOLS_REPLACED",
                            "MCP_SERVER_CREATED",
                            "MCP_SERVER_CHANGED",
                            "MCP_SERVER_RETIRED",
                            "MCP_TRUST_CHANGED",
                            "MCP_SYNC_REQUESTED",
                            "MCP_SYNC_SUCCEEDED",
                            "MCP_SYNC_FAILED",
                            "MCP_TOOLS_RELAYED",
                            "MCP_TOOLS_REGISTERED",
                            "TOOL_DEFINITION_CHANGED",
                            "TOOL_DEFINITION_ACCEPTED",
                            "TOOL_REVIEW_RECORDED",
                            "RELAY_FINDING_RECORDED",
                            "RELAY_FINDING_ACCEPTED",
                            "RELAY_FINDING_DISMISSED",
                            "CONFIG_LOADED",
                            "SKILL_GRANTED",
                            "SKILL_GRANT_ESCALATED",
                            "SKILL_ABORT_DENIED",
                            "SKILL_REQUEST_DENIED",
                            "SKILL_ANSWER_SETTLED",
                            "APPROVAL_ALLOW_RECORDED",
                            "SESSION_CLEARED",
                            "SESSION_REVOKED",
                            "AGENT_GRANTS_REVOKED",
                            "GRANT_REVOKED",
                            "SESSION_EXPIRED",
                            "RULE_CREATED",
                            "RULE_CHANGED",
                            "RULE_DELETED",
                            "TOOL_RULE_CREATED",
                            "TOOL_RULE_CHANGED",
                            "TOOL_RULE_DELETED",
                            "TOOL_SUBJECT_SET",
                            "TOOL_GRANTED",
                            "TOOL_CALL_APPROVED",
                            "TOOL_CALL_APPROVAL_USED",
                            "TOOL_ABORT_DENIED",
                            "TOOL_ANSWER_SETTLED",
                            "REQUEST_ESCALATED",
                            "NOTIFICATION_CHANNEL_ADDED",
                            "NOTIFICATION_CHANNEL_REMOVED",
                            "NOTIFICATION_PREFERENCES_CHANGED",
                            "WEBHOOK_SECRET_ROTATED",
                            "NOTIFICATION_CHANNEL_BROKEN",
                            "NOTIFICATION_CHANNEL_MENDED",
                            "NOTIFICATION_GAVE_UP",
                            "AUDIT_CHAIN_VERIFIED",
                            "AUDIT_CHAIN_BROKEN",
                            "AUDIT_SIGNING_KEY_ROTATED",
                        ],
                    )
                ),
                name="audit_event_action_valid",
                violation_error_message="Unknown audit action.",
            ),
        ),
        migrations.AddConstraint(
            model_name="audittreenode",
            constraint=models.CheckConstraint(
                condition=models.Q(("level__gte", 0), ("position__gte", 0)), name="audit_tree_node_in_tree"
            ),
        ),
        migrations.RunPython(restore_filter_indexes, migrations.RunPython.noop, elidable=False),
        migrations.RunPython(install_and_build, drop),
    ]
