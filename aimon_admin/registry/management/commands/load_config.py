"""`python manage.py load_config FILE.yaml`: MCP servers from a YAML file, all or nothing.

Every problem is reported as FILE:LINE; a file with any problem changes nothing (T13).
The format is described in aimon_admin/registry/config.py.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from aimon_admin.core.commands import CliCommand
from aimon_admin.core.plurals import counted
from aimon_admin.registry.config import ConfigError, config_apply, config_read

NOTHING_APPLIED = (
    "{file}: nothing was applied ({count} error)",
    "{file}: nothing was applied ({count} errors)",
)
LOADED = ("loaded {file}: {count} MCP server", "loaded {file}: {count} MCP servers")


class Command(CliCommand):
    help = (
        "Create or update MCP servers from a YAML file (mcpServers: {name: {command, args, env, "
        "url, headers, timeoutSeconds, annotationTrust, transport, enabled}}). Checked whole "
        "first, then applied in one transaction: any error applies nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the YAML file to load")

    def handle(self, *args: Any, **options: Any) -> None:
        filename = options["file"]
        try:
            config = config_read(filename)
            result = config_apply(config, actor=self.cli_actor())
        except ConfigError as exc:
            count = len(exc.errors)
            summary = counted(NOTHING_APPLIED, count, file=filename)
            raise CommandError("\n".join([*exc.errors, summary])) from exc
        for label, names in (
            ("created", result.created),
            ("changed", result.changed),
            ("unchanged", result.unchanged),
        ):
            if names:
                self.stdout.write(f"{label}: {', '.join(names)}")
        self.stdout.write(counted(LOADED, len(config.servers), file=filename))
