"""Restore the log filter indexes of 0005 on SQLite, where 0014 and 0015 rebuilt the audit table
to change the action's choices and the rebuild dropped them (they live outside the model
state). On PostgreSQL nothing was dropped and this adds nothing."""

from __future__ import annotations

import importlib

from django.db import migrations


def restore_filter_indexes(apps, schema_editor):  # type: ignore[no-untyped-def]
    earlier = importlib.import_module("aimon_admin.audit.migrations.0005_log_filter_indexes")
    model = apps.get_model("audit", "AuditEvent")
    with schema_editor.connection.cursor() as cursor:
        existing = set(schema_editor.connection.introspection.get_constraints(cursor, model._meta.db_table))
    for index in earlier.INDEXES:
        if index.name not in existing:
            schema_editor.add_index(model, index)


class Migration(migrations.Migration):
    dependencies = [("audit", "0015_request_escalated_action")]

    operations = [migrations.RunPython(restore_filter_indexes, migrations.RunPython.noop, elidable=False)]
