"""The audit chain's newest verification, read at every scrape (core.metrics.at_scrape): how
long ago it ran and whether it found the chain whole, from the log itself
(`verification.last_verification`: two index reads), so every node reports the same."""

from __future__ import annotations

import math
from collections.abc import Iterable

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from aimon_admin.audit.verification import last_verification

AGE_NAME = "aimon_audit_verification_age_seconds"
OK_NAME = "aimon_audit_verification_ok"


def verification_state() -> Iterable[Metric]:
    """Seconds since the newest verification (+Inf when the chain was never verified), and 1
    when it found the chain whole (0: broken, or never verified)."""
    last = last_verification()
    age = math.inf if last is None else max((timezone.now() - last.verified_at).total_seconds(), 0.0)
    yield GaugeMetricFamily(
        AGE_NAME, "Seconds since the audit chain was last verified (+Inf: never).", value=age
    )
    yield GaugeMetricFamily(
        OK_NAME,
        "1 when the newest audit chain verification found the chain whole; 0 when it found it "
        "broken, or when it was never verified.",
        value=1 if last is not None and last.ok else 0,
    )
