from __future__ import annotations

from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "aimon_admin.registry"
    label = "registry"
    verbose_name = "Tool and MCP registry"
