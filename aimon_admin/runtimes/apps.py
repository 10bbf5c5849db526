from __future__ import annotations

from django.apps import AppConfig


class RuntimesConfig(AppConfig):
    name = "aimon_admin.runtimes"
    label = "runtimes"
    verbose_name = "Agent runtimes"

    def ready(self) -> None:
        from aimon_admin.runtimes import schema  # noqa: F401  (registers the OpenAPI extension)
