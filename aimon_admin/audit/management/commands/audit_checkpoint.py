"""`python manage.py audit_checkpoint`: sign and publish a checkpoint of the audit log now (A4).

Beat does this every AIMON_AUDIT_CHECKPOINT_MINUTES; this is the same, on demand. Exits
non-zero with the reason when it refuses (no key, a log cut or rewritten since the last one).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from aimon_admin.audit.checkpoints import CheckpointRefusedError, checkpoint_sign
from aimon_admin.core.commands import CliCommand


class Command(CliCommand):
    help = "Sign a checkpoint of the audit log and publish it outside the database."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            checkpoint = checkpoint_sign()
        except CheckpointRefusedError as exc:
            raise CommandError(f"no checkpoint signed: {exc}") from exc
        self.stdout.write(f"checkpoint of {checkpoint.tree_size} events signed, root {checkpoint.root_hash}")
        if checkpoint.publish_problem:
            raise CommandError(checkpoint.publish_problem)
        self.stdout.write(f"published to {', '.join(checkpoint.published_to.splitlines())}")
