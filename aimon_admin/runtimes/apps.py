from __future__ import annotations

from django.apps import AppConfig


class RuntimesConfig(AppConfig):
    name = "aimon_admin.runtimes"
    label = "runtimes"
    verbose_name = "Agent runtimes"
