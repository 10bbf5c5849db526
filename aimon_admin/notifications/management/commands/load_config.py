"""`python manage.py load_config FILE.yaml`: MCP servers, tool subjects, tool rules, skill
rules and webhooks from a YAML file, all or nothing.

Every problem is reported as FILE:LINE; a file with any problem changes nothing (T13). The
format is described in aimon_admin/registry/config.py (servers, toolSubjects),
aimon_admin/approvals/config.py (toolRules, skillRules) and
aimon_admin/notifications/config.py (webhooks). It lives in notifications, the app that may
read all three. A webhook's secret made here is printed once, never stored in the clear
elsewhere nor written to the audit log.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from aimon_admin.core.commands import CliCommand
from aimon_admin.core.plurals import counted
from aimon_admin.notifications.config import config_apply, config_read
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
    ("webhooks added", "webhooks_created"),
    ("webhooks already there", "webhooks_unchanged"),
)
NEW_SECRET = "webhook {name}: its signing secret, shown only now: {secret}"  # noqa: S105 # nosec B105 - a message template


class Command(CliCommand):
    help = (
        "Create or update MCP servers (mcpServers), name tools' subject arguments (toolSubjects), "
        "add tool and skill rules (toolRules, skillRules) and signed webhooks (webhooks) from a "
        "YAML file. Checked whole "
        "first, then applied in one transaction: any error applies nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the YAML file to load")

    def handle(self, *args: Any, **options: Any) -> None:
        filename = options["file"]
        try:
            config = config_read(filename)
            loaded = config_apply(config, actor=self.cli_actor())
        except ConfigError as exc:
            count = len(exc.errors)
            summary = counted(NOTHING_APPLIED, count, file=filename)
            raise CommandError("\n".join([*exc.errors, summary])) from exc
        result = loaded.result
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
        for name, secret in loaded.new_secrets.items():
            self.stdout.write(NEW_SECRET.format(name=name, secret=secret))
        self.stdout.write(counted(LOADED, len(config.servers), file=filename))
