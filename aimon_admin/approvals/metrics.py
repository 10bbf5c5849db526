"""The approval requests waiting now, read at every scrape (core.metrics.at_scrape).

One grouped count over the (status, expires_at) index: a gauge computed from the database
where the truth is, never kept in step by increments that a crash or a sweep could miss. A
request past its deadline that no sweep has expired yet is not waiting (S9), so it is left
out, as every read leaves it out.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from aimon_admin.approvals.choices import RequestKind, RequestStatus
from aimon_admin.approvals.models import ApprovalRequest

PENDING_NAME = "aimon_approval_requests_pending"


def pending_requests() -> Iterable[Metric]:
    """`aimon_approval_requests_pending{kind}`: requests waiting for a person now, each kind
    given (0 when none waits)."""
    counts = dict(
        ApprovalRequest.objects.filter(status=RequestStatus.PENDING, expires_at__gt=timezone.now())
        .values_list("kind")
        .annotate(n=Count("id"))
        .order_by()
    )
    family = GaugeMetricFamily(
        PENDING_NAME, "Approval requests waiting for a person now (not past their deadline).", labels=["kind"]
    )
    for kind in RequestKind.values:
        family.add_metric([kind], counts.get(kind, 0))
    yield family
