"""`python manage.py load_config FILE.yaml`: MCP servers, tool subjects, tool rules and skill
rules from a YAML file, all or nothing.

Every problem is reported as FILE:LINE; a file with any problem changes nothing (T13). The
format is described in aimon_admin/registry/config.py (servers, toolSubjects) and
aimon_admin/approvals/config.py (toolRules, skillRules). It lives in approvals, the app
that may read both.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from aimon_admin.approvals.config import config_apply, config_read
from aimon_admin.core.commands import CliCommand
from aimon_admin.core.plurals import counted
from aimon_admin.registry.config import ConfigError

NOTHING_APPLIED = (
    "{file}: nothing was applied ({count} error)",
    "{file}: nothing was applied ({count} errors)",
)
LOADED = ("loaded {file}: {count} MCP server", "loaded {file}: {count} MCP servers")
REPORTED = (
    ("tool subjects set", "subjects_set"),
    ("tool subjects unchanged", "subjects_unchanged"),
)
RULES_REPORTED = (
    ("tool rules added", "tool_rules_created"),
    ("tool rules already there", "tool_rules_unchanged"),
    ("skill rules added", "skill_rules_created"),
    ("skill rules already there", "skill_rules_unchanged"),
)


class Command(CliCommand):
    help = (
        "Create or update MCP servers (mcpServers), name tools' subject arguments (toolSubjects) "
        "and add tool and skill rules (toolRules, skillRules) from a YAML file. Checked whole "
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
        for label, attribute in REPORTED:
            names = getattr(result, attribute)
            if names:
                self.stdout.write(f"{label}: {', '.join(names)}")
        for label, key in RULES_REPORTED:
            names = result.extra.get(key) or []
            if names:
                self.stdout.write(f"{label}: {', '.join(names)}")
        self.stdout.write(counted(LOADED, len(config.servers), file=filename))
