"""A base for management commands whose changes reach the audit log as 'command line'."""

from __future__ import annotations

import getpass
import os
from typing import Any

from django.core.management.base import BaseCommand

from aimon_admin.core.actors import Actor
from aimon_admin.core.context import Channel, bound


class CliCommand(BaseCommand):
    def execute(self, *args: Any, **options: Any) -> str | None:
        with bound(channel=Channel.CLI):
            return super().execute(*args, **options)

    @staticmethod
    def cli_actor() -> Actor:
        """The command line acts as the system, labelled with the operating-system user."""
        try:
            who = getpass.getuser()
        except (KeyError, OSError):
            who = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
        return Actor.system(f"cli:{who}")
