"""The audit chain's verifications in /metrics: each one recorded is counted by outcome, and
every scrape reads how long ago the newest ran and whether it found the chain whole."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from aimon_admin.audit.verification import audit_chain_verify
from aimon_admin.core.actors import Actor
from tests.core.metrics_support import moved, scrape

pytestmark = pytest.mark.django_db


def test_a_verification_is_counted_and_its_age_and_outcome_read_at_every_scrape(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    never = scrape()
    assert never.value("aimon_audit_verification_age_seconds") == math.inf
    assert never.value("aimon_audit_verification_ok") == 0

    with django_capture_on_commit_callbacks(execute=True):
        assert audit_chain_verify(actor=Actor.system("pytest")).ok
    verified = scrape()

    assert moved(never, verified, "aimon_audit_verifications_total", outcome="OK") == 1
    assert moved(never, verified, "aimon_audit_verifications_total", outcome="BROKEN") == 0
    assert verified.value("aimon_audit_verification_ok") == 1
    assert 0 <= verified.value("aimon_audit_verification_age_seconds") < 60
