from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "aimon_admin.core"
    label = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from aimon_admin.core import checks  # noqa: F401 - registers the start-up checks
