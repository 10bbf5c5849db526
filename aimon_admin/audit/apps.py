from __future__ import annotations

from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate


class AuditConfig(AppConfig):
    name = "aimon_admin.audit"
    label = "audit"
    verbose_name = "Audit log"

    def ready(self) -> None:
        from aimon_admin.audit import home
        from aimon_admin.audit import metrics as audit_metrics
        from aimon_admin.core import home as home_sections
        from aimon_admin.core import metrics

        post_migrate.connect(_ensure_append_only_triggers, sender=self)
        # The home's recent warnings and chain verification card.
        home_sections.provide("audit:warnings", home.audit_sections, order=home.WARNINGS_ORDER)
        home_sections.provide("audit:chain", home.chain_section, order=home.CHAIN_ORDER)
        # A4: signing that is not keeping up (no key, refused, overdue) is said on the home.
        home_sections.provide("audit:checkpoints", home.checkpoints_section, order=home.CHECKPOINTS_ORDER)
        # The chain's newest verification, its age and outcome, read at every scrape of /metrics.
        metrics.at_scrape(audit_metrics.verification_state)


def _ensure_append_only_triggers(using: str = "default", **_: object) -> None:
    """(Re)install the append-only triggers after every migrate.

    On SQLite, a migration that alters the audit table rebuilds it, and the rebuild
    drops its triggers; installing them again here (idempotently) means no migration,
    now or later, can leave the log without them.
    """
    from aimon_admin.audit import triggers

    triggers.install(connections[using])
