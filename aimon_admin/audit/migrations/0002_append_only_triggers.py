"""Install the triggers that refuse UPDATE and DELETE on audit events (A2)."""

from __future__ import annotations

from django.db import migrations


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    from aimon_admin.audit import triggers

    triggers.install(schema_editor.connection)


def drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    from aimon_admin.audit import triggers

    triggers.drop(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [migrations.RunPython(install, drop)]
