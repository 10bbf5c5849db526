"""Start-up checks for core's settings: the keys that encrypt stored secrets."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured

from aimon_admin.core import encryption


@register()
def secrets_key_configured(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Every process needs the keys: without them no stored secret can be read or written."""
    try:
        encryption.configured_keys()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="core.E001")]
    return []
