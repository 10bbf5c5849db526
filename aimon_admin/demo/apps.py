from __future__ import annotations

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "aimon_admin.demo"
    label = "demo"
    verbose_name = "Demo"
