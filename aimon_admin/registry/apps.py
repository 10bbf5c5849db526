from __future__ import annotations

from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "aimon_admin.registry"
    label = "registry"
    verbose_name = "Tool and MCP registry"

    def ready(self) -> None:
        from aimon_admin.core import home as home_sections
        from aimon_admin.registry import home

        # The operators' home: what waits for review and what fails (issue 17).
        home_sections.provide("registry", home.registry_section, order=home.ORDER)
