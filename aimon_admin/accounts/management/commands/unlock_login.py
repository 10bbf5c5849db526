"""`python manage.py unlock_login NAME`: lift a sign-in lockout (audited)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from aimon_admin.accounts.services import login_unlock
from aimon_admin.core.commands import CliCommand
from aimon_admin.core.plurals import counted

UNLOCKED = (
    "unlocked {name} ({count} failure record cleared)",
    "unlocked {name} ({count} failure records cleared)",
)


class Command(CliCommand):
    help = "Clear a username's failed sign-ins from every address, lifting its lockout."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the username as typed at sign-in")

    def handle(self, *args: Any, **options: Any) -> None:
        count = login_unlock(username=options["name"], actor=self.cli_actor())
        self.stdout.write(counted(UNLOCKED, count, name=options["name"]))
