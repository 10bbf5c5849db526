"""Indexes for the auditor's log filters: each starts with the filter's column and ends
with seq, so "filter X ORDER BY seq DESC LIMIT 51" (and the export's ascending chunks)
is one index range however large the log is.

Written with the schema editor rather than AddIndex so that they live outside the
model state: AuditEvent.Meta (aimon_admin/audit/models.py) belongs to the audit store,
and a makemigrations run against a Meta without them would otherwise propose dropping
them. Moving them into Meta.indexes later needs a state-only (SeparateDatabaseAndState)
migration with these exact names.

Existing: (action, -seq), (runtime, -seq), (created_at), seq unique.
"""

from __future__ import annotations

from django.db import migrations, models
from django.db.models import ExpressionWrapper, F
from django.db.models.fields.json import KT

INDEXES = (
    models.Index(fields=["level", "-seq"], name="audit_level_seq"),
    models.Index(fields=["actor_label", "-seq"], name="audit_actor_label_seq"),
    models.Index(fields=["session_key", "-seq"], name="audit_session_seq"),
    models.Index(fields=["subject", "-seq"], name="audit_subject_seq"),
    # The subject filter also matches a skill named in the details (filters.py).
    # The same expression as selectors.DETAIL_SKILL.
    models.Index(
        ExpressionWrapper(KT("details__skill"), output_field=models.TextField()),
        F("seq").desc(),
        name="audit_detail_skill_seq",
    ),
)


def create(apps, schema_editor):  # type: ignore[no-untyped-def]
    model = apps.get_model("audit", "AuditEvent")
    for index in INDEXES:
        schema_editor.add_index(model, index)


def drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    model = apps.get_model("audit", "AuditEvent")
    for index in INDEXES:
        schema_editor.remove_index(model, index)


class Migration(migrations.Migration):
    dependencies = [("audit", "0004_mcp_tools_registered")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
