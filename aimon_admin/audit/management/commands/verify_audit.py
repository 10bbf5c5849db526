"""`python manage.py verify_audit`: walk the audit chain; exit 1 naming the first bad event."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from aimon_admin.audit.services import audit_verify_chain


class Command(BaseCommand):
    help = "Verify the audit log's hash chain; exits non-zero naming the first bad event."

    def handle(self, *args: Any, **options: Any) -> None:
        count, problem = audit_verify_chain()
        if problem is not None:
            raise CommandError(f"audit chain BROKEN at {problem} ({count} events read)")
        self.stdout.write(self.style.SUCCESS(f"audit chain OK: {count} events verified"))
