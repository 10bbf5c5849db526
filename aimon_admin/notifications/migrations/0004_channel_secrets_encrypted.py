"""Channels' addresses and webhooks' signing secrets encrypted at rest (core.encryption):
every stored value is encrypted with the newest key. Reversible: going back decrypts them
(the key is needed both ways)."""

from __future__ import annotations

from django.db import migrations

import aimon_admin.core.encryption

FIELDS = ("target", "secret")


def seal(apps, schema_editor) -> None:
    channel = apps.get_model("notifications", "Channel")
    aimon_admin.core.encryption.migrate_columns(channel, schema_editor, FIELDS, seal=True)


def unseal(apps, schema_editor) -> None:
    channel = apps.get_model("notifications", "Channel")
    aimon_admin.core.encryption.migrate_columns(channel, schema_editor, FIELDS, seal=False)


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0003_checkpoint_deliveries"),
    ]

    operations = [
        migrations.AlterField(
            model_name="channel",
            name="secret",
            field=aimon_admin.core.encryption.EncryptedTextField(blank=True, default=""),
        ),
        migrations.AlterField(
            model_name="channel",
            name="target",
            field=aimon_admin.core.encryption.EncryptedTextField(),
        ),
        migrations.RunPython(seal, unseal),
    ]
