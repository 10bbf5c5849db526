"""Start-up checks of the approval settings (S12)."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from aimon_admin.approvals.checks import IDLE_TTL_BELOW_SEEN_RESOLUTION, idle_ttl_exceeds_seen_resolution
from aimon_admin.approvals.services.sessions import SEEN_RESOLUTION


@pytest.mark.parametrize("ttl", [1, 30, int(SEEN_RESOLUTION.total_seconds())])
def test_an_idle_ttl_not_above_the_last_seen_interval_is_refused_at_start(
    settings: object, ttl: int
) -> None:  # S12
    settings.AIMON_SESSION_IDLE_TTL_SECONDS = ttl  # type: ignore[attr-defined]

    [error] = idle_ttl_exceeds_seen_resolution()

    assert error.id == "approvals.E001"
    assert error.msg == IDLE_TTL_BELOW_SEEN_RESOLUTION.format(ttl=ttl, resolution=60)
    assert "AIMON_SESSION_IDLE_TTL_SECONDS" in error.msg  # names both settings
    assert "SEEN_RESOLUTION" in error.msg
    with pytest.raises(SystemCheckError, match=re.escape("approvals.E001")):
        call_command("check")


@pytest.mark.parametrize("ttl", [61, 3600, 86400])
def test_an_idle_ttl_above_the_last_seen_interval_passes(settings: object, ttl: int) -> None:  # S12
    settings.AIMON_SESSION_IDLE_TTL_SECONDS = ttl  # type: ignore[attr-defined]
    assert idle_ttl_exceeds_seen_resolution() == []
