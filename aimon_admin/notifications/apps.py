from __future__ import annotations

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "aimon_admin.notifications"
    label = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        from aimon_admin.notifications import tasks

        tasks.listen()
