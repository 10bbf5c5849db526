"""`python manage.py audit_key`: the key that signs the audit log's checkpoints (A4).

    manage.py audit_key create PATH [--if-missing]   # a new Ed25519 key, owner-only; prints its public key
    manage.py audit_key show                         # the configured key's id and public key (PEM)
    manage.py audit_key rotate NEW_PATH              # a new key, announced in the log signed by the old one

The key file is named by AIMON_AUDIT_SIGNING_KEY. After `rotate`, point AIMON_AUDIT_SIGNING_KEY
at NEW_PATH and restart; keep the old public key: it verifies the checkpoints signed before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from aimon_admin.audit import signing
from aimon_admin.core.commands import CliCommand


class Command(CliCommand):
    help = "Create, show or rotate the Ed25519 key that signs the audit log's checkpoints."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="write a new key to PATH (refuses to replace a file)")
        create.add_argument("path", type=Path)
        create.add_argument(
            "--if-missing", action="store_true", help="do nothing when PATH exists already (make run)"
        )
        actions.add_parser("show", help="the configured key's id and public key")
        rotate = actions.add_parser("rotate", help="a new key at NEW_PATH, announced in the log")
        rotate.add_argument("new_path", type=Path)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["action"] == "create":
                self._create(options["path"], if_missing=options["if_missing"])
            elif options["action"] == "show":
                self._show(signing.signing_key())
            else:
                from aimon_admin.audit.rotation import key_rotate

                new = key_rotate(new_path=options["new_path"], actor=self.cli_actor())
                self.stdout.write(
                    f"new key {signing.key_id(new.public_key())} written to {options['new_path']} and "
                    "announced in the audit log; now set AIMON_AUDIT_SIGNING_KEY to it and restart."
                )
                self._show(new)
        except signing.SigningKeyError as exc:
            raise CommandError(str(exc)) from exc

    def _create(self, path: Path, *, if_missing: bool) -> None:
        if path.exists():
            if if_missing:
                self._show(signing.read_private_key(path))
                return
            raise CommandError(f"{path} exists already: a signing key is never replaced (see rotate)")
        try:
            key = signing.create_key(path)
        except OSError as exc:
            raise CommandError(f"cannot write {path}: {exc}") from exc
        self.stdout.write(f"signing key written to {path} (readable by its owner only)")
        self._show(key)

    def _show(self, key: Any) -> None:
        public = key.public_key()
        self.stdout.write(f"key id {signing.key_id(public)}")
        self.stdout.write(signing.public_pem(public).rstrip())
