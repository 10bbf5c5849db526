"""The log filter indexes of 0005 move into AuditEvent.Meta (the model state), so that Django
keeps them whenever it rebuilds the events' table on SQLite: a change of the action's choices
does, and 0014, 0015, 0017 and 0018 each dropped them (0016 and 0017 made them again, 0018 did
not). The state gains them as they are; the database only gets back, on SQLite, those a
rebuild dropped (on PostgreSQL nothing was dropped and nothing is made)."""

from __future__ import annotations

import importlib

from django.db import migrations

FILTER_INDEXES = importlib.import_module("aimon_admin.audit.migrations.0005_log_filter_indexes").INDEXES


def restore_filter_indexes(apps, schema_editor):  # type: ignore[no-untyped-def]
    earlier = importlib.import_module("aimon_admin.audit.migrations.0016_restore_filter_indexes")
    earlier.restore_filter_indexes(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("audit", "0018_secrets_reencrypted_action")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex("auditevent", index) for index in FILTER_INDEXES],
            database_operations=[
                migrations.RunPython(restore_filter_indexes, migrations.RunPython.noop, elidable=False)
            ],
        )
    ]
