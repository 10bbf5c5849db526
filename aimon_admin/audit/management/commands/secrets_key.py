"""`python manage.py secrets_key`: the keys that encrypt the secrets stored for other systems
(core.encryption; docs/operations.md, "Secrets at rest").

    manage.py secrets_key create [PATH] [--if-missing]   # a new key: printed, or written owner-only to PATH
    manage.py secrets_key show                           # the configured keys' ids, newest first, and
                                                         # how many stored values each one opens
    manage.py secrets_key reencrypt [--batch N]          # every stored secret under the newest key (audited)

The keys are in AIMON_SECRETS_KEY (newest first, separated by commas) or in the file
AIMON_SECRETS_KEY_FILE names (one a line, newest first). To rotate: `create` a new key, put it
first, restart every process, `reencrypt`, then drop the old key and restart again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, CommandParser
from django.db import connections, router

from aimon_admin.core import encryption
from aimon_admin.core.commands import CliCommand


class Command(CliCommand):
    help = "Create a key for the stored secrets, show the configured ones, or re-encrypt with the newest."
    # `create` is how a missing key is made: the start-up checks would refuse to run it.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="a new key, printed, or written to PATH (never replaced)")
        create.add_argument("path", type=Path, nargs="?")
        create.add_argument(
            "--if-missing", action="store_true", help="do nothing when PATH exists already (make run)"
        )
        actions.add_parser("show", help="the configured keys' ids and how many stored values each opens")
        reencrypt = actions.add_parser("reencrypt", help="every stored secret under the newest key")
        reencrypt.add_argument("--batch", type=int, default=encryption.BATCH, help="rows per transaction")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "create":
            self._create(options["path"], if_missing=options["if_missing"])
            return
        try:
            encryption.configured_keys()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        if options["action"] == "show":
            self._show()
            return
        if options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        from aimon_admin.audit.rotation import secrets_reencrypt

        counts = secrets_reencrypt(actor=self.cli_actor(), batch=options["batch"])
        for label, figures in counts.items():
            self.stdout.write(
                f"{label}: {figures[encryption.REWRITTEN]} re-encrypted, {figures[encryption.CURRENT]} "
                f"already under the newest key, {figures[encryption.UNREADABLE]} unreadable"
            )
        if any(figures[encryption.UNREADABLE] for figures in counts.values()):
            raise CommandError(
                "some stored secrets open with no configured key (see above): keep every old key "
                "until they are restored or entered again"
            )
        self.stdout.write("every stored secret is under the newest key: older keys may now be dropped")

    def _create(self, path: Path | None, *, if_missing: bool) -> None:
        if path is None:
            self.stdout.write(encryption.new_key())
            return
        if path.exists():
            if if_missing:
                self.stdout.write(f"{path} exists already; kept")
                return
            raise CommandError(f"{path} exists already: a key file is never replaced")
        try:
            key = encryption.create_key_file(path)
        except OSError as exc:
            raise CommandError(f"cannot write {path}: {exc}") from exc
        self.stdout.write(
            f"key {encryption.key_id(key)} written to {path} (readable by its owner only); set "
            f"AIMON_SECRETS_KEY_FILE={path} and keep a copy apart from the database's backups"
        )

    def _show(self) -> None:
        keys = encryption.configured_keys()
        opens = dict.fromkeys(range(len(keys)), 0)
        unreadable = 0
        fernets = [Fernet(key) for key in keys]
        for model, fields in encryption.encrypted_fields():
            connection = connections[router.db_for_read(model)]
            for token in _stored(model, fields, connection):
                number = next((n for n, f in enumerate(fernets) if _opens(f, token)), None)
                if number is None:
                    unreadable += 1
                else:
                    opens[number] += 1
        for number, key in enumerate(keys):
            role = "encrypts and decrypts" if number == 0 else "decrypts only"
            self.stdout.write(f"key {encryption.key_id(key)} ({role}): opens {opens[number]} stored values")
        self.stdout.write(f"{unreadable} stored values open with no configured key")


def _opens(fernet: Fernet, token: str) -> bool:
    try:
        fernet.decrypt(token.encode())
    except InvalidToken:
        return False
    return True


def _stored(model: Any, fields: tuple[str, ...], connection: Any) -> list[str]:
    """The stored (encrypted) form of every non-empty value of `fields`."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(model._meta.get_field(name).column) for name in fields)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {quote(model._meta.db_table)}")  # noqa: S608 # nosec B608 - names from the model, quoted
        return [value for row in cursor.fetchall() for value in row if value]
