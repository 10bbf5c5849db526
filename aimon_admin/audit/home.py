"""What the audit log puts on the home (core.home), for whoever may read it (auditors and
operators): the recent warnings, the chain verification card with its Verify now button,
the very card of the audit home, and the signed checkpoints card while signing is not
keeping up (A4).

The warnings are counted as the log's own level filter reads them: a seq range on the
(level, seq) index, its start found through the created_at index (clocks of several nodes
may disagree, so a margin wider than the day; the time itself still filters), counted up to
50. The card reads the newest verification event (one index read).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from urllib.parse import urlencode

from django.db.models import Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from aimon_admin.audit.choices import AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.verification import last_verification
from aimon_admin.audit.verify_now import PERMISSION, verification_card
from aimon_admin.core.home import Figure, Section

WARNINGS_ORDER = 41
CHAIN_ORDER = 42
CHECKPOINTS_ORDER = 43
WARNINGS_LIMIT = 50
RECENT = dt.timedelta(hours=24)
# As the log's time filters (aimon_admin/audit_pages/selectors.CLOCK_SKEW_MARGIN).
CLOCK_SKEW_MARGIN = dt.timedelta(minutes=5)

# Words people see (tests import these).
TITLE = "Audit"
WARNINGS_LABEL = ("warning in the last 24 hours", "warnings in the last 24 hours")
WARNINGS_HELP = "Failed sign-ins, syncs that gave up, channels that broke: each count opens them in the log."


def warnings_since(since: dt.datetime, *, limit: int = WARNINGS_LIMIT) -> int:
    """WARNING events at or after `since`, counted up to `limit` + 1, in one query: the seq
    to start from (the last event well before `since`) is a subquery."""
    floor = (
        AuditEvent.objects.filter(created_at__lt=since - CLOCK_SKEW_MARGIN)
        .order_by("-created_at")
        .values("seq")[:1]
    )
    events = AuditEvent.objects.filter(
        level=AuditLevel.WARNING, created_at__gte=since, seq__gt=Coalesce(Subquery(floor), Value(0))
    )
    return events.values("pk")[: limit + 1].count()


def warnings_url(since: dt.datetime) -> str:
    """The log, filtered as `warnings_since` counts."""
    when = since.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{reverse('audit:log')}?{urlencode({'level': AuditLevel.WARNING, 'since': when})}"


def audit_sections(request: HttpRequest) -> Iterator[Section]:
    if not request.user.has_perm(PERMISSION):
        return
    # To the second, as the link says it: the count and the list it opens read the same range.
    since = (timezone.now() - RECENT).replace(microsecond=0)
    yield Section(
        key="audit",
        title=TITLE,
        figures=(
            Figure(
                "warnings",
                warnings_since(since),
                WARNINGS_LABEL,
                warnings_url(since),
                limit=WARNINGS_LIMIT,
                help=WARNINGS_HELP,
            ),
        ),
    )


def chain_section(request: HttpRequest) -> Iterator[Section]:
    if not request.user.has_perm(PERMISSION):
        return
    card = verification_card(user=request.user, last=last_verification())
    # A rendered template is already safe text (SafeString): its variables were escaped.
    html = render_to_string("audit/_verification.html", card, request=request)
    yield Section(key="chain", title="Chain verification", html=html)  # type: ignore[arg-type]


def checkpoints_section(request: HttpRequest) -> Iterator[Section]:
    """The Signed checkpoints card, only while signing is not keeping up (no key, a refusal,
    a checkpoint overdue or not published): signing never stops unseen (A4)."""
    if not request.user.has_perm(PERMISSION):
        return
    from aimon_admin.audit import checkpoints, proofs

    proofs.sign_if_due_without_beat()
    status = checkpoints.signing_status()
    if not status.problems:
        return
    html = render_to_string("audit/_checkpoint_card.html", {"status": status}, request=request)
    yield Section(key="checkpoints", title="Signed checkpoints", html=html)  # type: ignore[arg-type]
