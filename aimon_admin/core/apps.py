from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "aimon_admin.core"
    label = "core"
    verbose_name = "Core"
