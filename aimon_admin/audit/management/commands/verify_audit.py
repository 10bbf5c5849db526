"""`python manage.py verify_audit`: verify the audit chain (A2).

    manage.py verify_audit                    # the whole chain; exit 1 naming the first bad event
    manage.py verify_audit --from-checkpoint  # only what was written since the last verification
    manage.py verify_audit --record           # also write the outcome as an AUDIT_CHAIN_* event
    manage.py verify_audit --file log.jsonl   # an exported JSON Lines file, outside the database

Every walk of the database also checks the last verification's checkpoint, so a log cut
short since then is reported even though what is left still chains from the genesis hash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from aimon_admin.audit.verification import (
    audit_chain_check,
    audit_chain_verification_record,
    verify_export_file,
)
from aimon_admin.core.commands import CliCommand
from aimon_admin.core.plurals import counted

EVENTS = ("{count} event", "{count} events")
GAPS = ("{count} gap", "{count} gaps")


class Command(CliCommand):
    help = (
        "Verify the audit log's hash chain (or an exported JSON Lines file); "
        "exits non-zero naming the first bad event."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--file",
            type=Path,
            metavar="PATH",
            help="verify an exported JSON Lines file instead of the database",
        )
        parser.add_argument(
            "--from-checkpoint",
            action="store_true",
            help="start from the last verification's checkpoint instead of the genesis hash",
        )
        parser.add_argument(
            "--record",
            action="store_true",
            help="write the outcome to the audit log (AUDIT_CHAIN_VERIFIED or AUDIT_CHAIN_BROKEN)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["file"] is not None:
            if options["record"] or options["from_checkpoint"]:
                raise CommandError(
                    "--file verifies a file only: --record and --from-checkpoint are for the database"
                )
            self._verify_file(options["file"])
            return
        result = audit_chain_check(full=not options["from_checkpoint"])
        if options["record"]:
            event = audit_chain_verification_record(result=result, actor=self.cli_actor())
            self.stdout.write(f"recorded as event seq={event.seq} ({event.action})")
        if result.problem is not None:
            raise CommandError(
                f"audit chain BROKEN at {result.problem} ({counted(EVENTS, result.events_read)} read)"
            )
        if result.full:
            self.stdout.write(
                self.style.SUCCESS(f"audit chain OK: {counted(EVENTS, result.event_count)} verified")
            )
        else:
            self.stdout.write(
                self.style.SUCCESS(
                    f"audit chain OK: {counted(EVENTS, result.event_count)} verified "
                    f"({result.events_read} read after the checkpoint at seq={result.started_after_seq})"
                )
            )

    def _verify_file(self, path: Path) -> None:
        try:
            result = verify_export_file(path)
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from exc
        if result.problem is not None:
            raise CommandError(
                f"export {path} BROKEN at {result.problem} ({result.events} good lines before it)"
            )
        if result.events == 0:
            self.stdout.write(self.style.SUCCESS(f"export {path} OK: empty (no events)"))
            return
        span = f"seq {result.first_seq}..{result.last_seq}"
        events = counted(EVENTS, result.events)
        if not result.filtered:
            self.stdout.write(
                self.style.SUCCESS(f"export {path} OK: {events}, {span}, a complete chain from genesis")
            )
            return
        gaps = ", ".join(
            f"{start}..{end}" if start != end else f"{start}" for start, end in result.first_gaps
        )
        more = " …" if result.gaps > len(result.first_gaps) else ""
        start_note = (
            f"; starts at seq {result.first_seq}, so its first event's link is not checked"
            if result.first_seq != 1
            else ""
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"export {path} OK: {events}, {span}, a filtered subset of the chain: "
                f"every line's hash checks out, and so does every link between consecutive seqs; "
                f"{counted(GAPS, result.gaps)} (seqs not in the file: {gaps}{more}){start_note}"
            )
        )
