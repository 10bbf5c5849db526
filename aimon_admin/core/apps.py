from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "aimon_admin.core"
    label = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from aimon_admin.core import checks  # noqa: F401 - registers the start-up checks
        from aimon_admin.core.encryption import encrypted_fields, unreadable_forget

        # The home's list of secrets no key opens is kept a while: a change to a row ends it.
        for model, _ in encrypted_fields():
            uid = f"unreadable-{model._meta.label}"
            post_save.connect(unreadable_forget, sender=model, dispatch_uid=uid)
            post_delete.connect(unreadable_forget, sender=model, dispatch_uid=uid)
