from __future__ import annotations

import logging

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "aimon_admin.notifications"
    label = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        from aimon_admin.notifications import tasks

        tasks.listen()
        # The request page's timeline hears of each message from here (core.timeline).
        from aimon_admin.core import timeline
        from aimon_admin.notifications.timeline import request_entries

        timeline.provide("notifications", request_entries)
        # The operators' home hears of channels whose stored secrets cannot be decrypted.
        from aimon_admin.core import home as home_sections
        from aimon_admin.notifications import home

        home_sections.provide("notifications", home.secrets_section, order=home.ORDER)
        # Apprise logs every channel URL whole at DEBUG, and urllib3 each request's path, the
        # tokens inside them included: never below INFO, whatever LOG_LEVEL says
        # (tests/notifications/test_no_secrets_logged.py).
        for name in ("apprise", "urllib3"):
            logger = logging.getLogger(name)
            logger.setLevel(max(logger.getEffectiveLevel(), logging.INFO))
