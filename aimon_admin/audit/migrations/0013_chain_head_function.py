"""The chain's lock and head in one round trip on PostgreSQL (aimon_admin/audit/chain_head.py)."""

from __future__ import annotations

from django.db import migrations


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    from aimon_admin.audit import chain_head

    chain_head.install(schema_editor.connection)


def drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    from aimon_admin.audit import chain_head

    chain_head.drop(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("audit", "0012_notification_actions")]

    operations = [migrations.RunPython(install, drop)]
