"""Start-up checks for the approval settings (S12)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register

IDLE_TTL_BELOW_SEEN_RESOLUTION = (
    "AIMON_SESSION_IDLE_TTL_SECONDS ({ttl}) must be greater than the session last-seen write "
    "interval, SEEN_RESOLUTION in aimon_admin/approvals/services/sessions.py ({resolution} seconds): a "
    "session's last_seen_at is written at most once per interval, so with a shorter idle TTL "
    "active sessions look idle and lose their approvals."
)
IDLE_TTL_HINT = "Set AIMON_SESSION_IDLE_TTL_SECONDS above {resolution} (the default is 86400, one day)."


@register()
def idle_ttl_exceeds_seen_resolution(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """S12: an idle TTL at or under the last-seen write interval makes active sessions idle."""
    from aimon_admin.approvals.services.sessions import SEEN_RESOLUTION

    ttl = settings.AIMON_SESSION_IDLE_TTL_SECONDS
    resolution = int(SEEN_RESOLUTION.total_seconds())
    if ttl > resolution:
        return []
    return [
        Error(
            IDLE_TTL_BELOW_SEEN_RESOLUTION.format(ttl=ttl, resolution=resolution),
            hint=IDLE_TTL_HINT.format(resolution=resolution),
            id="approvals.E001",
        )
    ]
