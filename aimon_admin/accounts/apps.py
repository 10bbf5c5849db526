from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AccountsConfig(AppConfig):
    name = "aimon_admin.accounts"
    label = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from aimon_admin.accounts import home, signals  # noqa: F401
        from aimon_admin.core import home as home_sections

        # A3: last_login is written by services.login_record, in the transaction of its
        # LOGIN_SUCCEEDED event, not by Django's own receiver in a transaction of its own.
        user_logged_in.disconnect(dispatch_uid="update_last_login")

        # The handler creates every app's permissions itself before it assigns them, so
        # it does not depend on the order apps are migrated in.
        post_migrate.connect(_sync_groups, sender=self)
        # The operators' home: locked sign-ins and the people pages.
        home_sections.provide("accounts:people", home.people_section, order=home.ORDER)


def _sync_groups(using: str = "default", **_: object) -> None:
    from aimon_admin.accounts.services import role_groups_sync

    role_groups_sync(using=using)
