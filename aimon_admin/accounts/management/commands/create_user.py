"""`python manage.py create_user NAME --role ROLE --password-stdin` (docs/operations.md)."""

from __future__ import annotations

import sys
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from aimon_admin.accounts.roles import Role
from aimon_admin.accounts.services import UserExistsError, user_create
from aimon_admin.core.commands import CliCommand


class Command(CliCommand):
    help = "Create a person with a role. The password is read from standard input."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the username")
        parser.add_argument(
            "--role",
            required=True,
            action="append",
            choices=Role.values,
            help="operator, approver or auditor (repeat for several)",
        )
        parser.add_argument(
            "--password-stdin",
            action="store_true",
            help="read the password from standard input (its first line)",
        )
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        password: str | None = None
        if options["password_stdin"]:
            password = sys.stdin.readline().rstrip("\r\n")
            if not password:
                raise CommandError("no password on standard input")
        try:
            user = user_create(
                username=options["name"],
                password=password,
                roles=options["role"],
                email=options["email"],
                actor=self.cli_actor(),
            )
        except UserExistsError as exc:
            raise CommandError(str(exc)) from exc
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        note = "" if password else " (no password: they cannot sign in until one is set)"
        self.stdout.write(f"created {user.username} ({', '.join(user.roles)}){note}")
