"""`python manage.py create_runtime NAME ...`: prints the new token alone on its last line."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.db import transaction

from aimon_admin.accounts.models import User
from aimon_admin.core.choices import SideEffectLevel
from aimon_admin.core.commands import CliCommand
from aimon_admin.runtimes.services import RuntimeExistsError, runtime_create, token_issue


class Command(CliCommand):
    help = "Register an agent runtime and issue its first API token (printed once, last line)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--ceiling", choices=SideEffectLevel.values, default=SideEffectLevel.MUTATING)
        parser.add_argument(
            "--exempt-at-or-below",
            choices=SideEffectLevel.values,
            default=SideEffectLevel.READ_ONLY,
        )
        parser.add_argument("--owner", help="username of the runtime's owner")
        parser.add_argument(
            "--escalate-after-minutes",
            type=int,
            help="send a request nobody answered in this many minutes to the operators and the owner (P2)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        owner = None
        if options["owner"]:
            owner = User.objects.filter(username=options["owner"]).first()
            if owner is None:
                raise CommandError(f"no user named {options['owner']!r}")
        actor = self.cli_actor()
        minutes = options["escalate_after_minutes"]
        try:
            # One transaction: a runtime is never left behind without the token it was for.
            with transaction.atomic():
                runtime = runtime_create(
                    name=options["name"],
                    ceiling=options["ceiling"],
                    exempt_at_or_below=options["exempt_at_or_below"],
                    owner=owner,
                    escalate_after_seconds=None if minutes is None else minutes * 60,
                    actor=actor,
                )
                _, token = token_issue(runtime=runtime, actor=actor, label="created by create_runtime")
        except RuntimeExistsError as exc:
            raise CommandError(str(exc)) from exc
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stderr.write(
            f"created runtime {runtime.name} (ceiling {runtime.ceiling}, exempt at or below "
            f"{runtime.exempt_at_or_below}); its token follows and is shown only once:"
        )
        self.stdout.write(token)
