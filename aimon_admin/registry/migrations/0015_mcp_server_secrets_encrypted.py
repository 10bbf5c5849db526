"""MCP servers' env, headers and URL encrypted at rest (core.encryption): the columns become
text, then every stored value is encrypted with the newest key. Reversible: going back
decrypts them (the key is needed both ways)."""

from __future__ import annotations

import django.core.validators
from django.db import migrations

import aimon_admin.core.encryption

FIELDS = ("env", "headers", "url")


def seal(apps, schema_editor) -> None:
    server = apps.get_model("registry", "McpServer")
    aimon_admin.core.encryption.migrate_columns(server, schema_editor, FIELDS, seal=True)


def unseal(apps, schema_editor) -> None:
    server = apps.get_model("registry", "McpServer")
    aimon_admin.core.encryption.migrate_columns(server, schema_editor, FIELDS, seal=False)


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0014_relayed_only_tools_not_served"),
    ]

    operations = [
        migrations.AlterField(
            model_name="mcpserver",
            name="env",
            field=aimon_admin.core.encryption.EncryptedJSONField(
                blank=True, default=dict, help_text="Never sent to runtimes."
            ),
        ),
        migrations.AlterField(
            model_name="mcpserver",
            name="headers",
            field=aimon_admin.core.encryption.EncryptedJSONField(
                blank=True, default=dict, help_text="Never sent to runtimes."
            ),
        ),
        migrations.AlterField(
            model_name="mcpserver",
            name="url",
            field=aimon_admin.core.encryption.EncryptedTextField(
                blank=True, default="", validators=[django.core.validators.MaxLengthValidator(500)]
            ),
        ),
        migrations.RunPython(seal, unseal),
    ]
