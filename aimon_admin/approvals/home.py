"""What approvals puts on the home (core.home): the Requests section for whoever answers
requests, and the escalated grants in force for whoever reads the audit log.

Registered in ApprovalsConfig.ready(). Both counts are index reads: the pending requests of
what the inbox shows (status and expiry, `request_status_expiry`; the principal for an
approver, `request_principal_status`) in one aggregate query, and the escalated grants in
force through the partial unique index of active agent-wide grants, counted up to 50.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, Q
from django.http import HttpRequest
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.approvals import selectors
from aimon_admin.approvals.choices import RequestKind
from aimon_admin.approvals.inbox_filter import InboxFilter
from aimon_admin.core.home import Figure, Section, Step

ANSWER_PERMISSION = "approvals.answer_approvalrequest"
AUDIT_PERMISSION = "audit.view_auditevent"
REQUESTS_ORDER = 10
ESCALATIONS_ORDER = 40

# Words people see (tests import these).
REQUESTS_TITLE = "Requests to answer"
AUDIT_TITLE = "Audit"
MINE_LABEL = "from your own sessions"
ALL_LABEL = "waiting for an answer"
SKILL_LABEL = ("skill request", "skill requests")
TOOL_LABEL = ("tool request", "tool requests")
SENT_LABEL = "sent to operators: nobody answered in time"
SENT_HELP = (
    "Requests still waiting past their runtime's time: the operators and the runtime's owner "
    "were told through their channels."
)
ESCALATED_LABEL = ("escalated grant in force", "escalated grants in force")
NOTHING_PENDING = "Nothing is waiting for an answer. Requests appear in the inbox as your agents ask."
OPEN_INBOX = "Open the inbox"
REQUESTS_HELP = "Each count opens the inbox showing just those requests."
ESCALATED_HELP = (
    "Session answers given where no session could hold them, made agent-wide: each holds for every "
    "session of its runtime until it is revoked."
)


def pending_counts(*, user: User) -> dict[str, int]:
    """Open requests this person may answer (what their inbox shows): in all, from their own
    sessions, by kind, and sent to the operators because nobody answered in time (P2). One
    query over what the inbox lists (`selectors.pending_requests_for`): same scope (S13),
    same deadline, so a count always matches the list its link opens."""
    counts = (
        selectors.pending_requests_for(user=user)
        .order_by()
        .aggregate(
            all=Count("pk"),
            mine=Count("pk", filter=Q(principal=user.get_username())),
            skill=Count("pk", filter=Q(kind=RequestKind.SKILL)),
            tool=Count("pk", filter=Q(kind=RequestKind.TOOL)),
            escalated=Count("pk", filter=Q(escalated_at__isnull=False)),
        )
    )
    return {key: value or 0 for key, value in counts.items()}


def requests_section(request: HttpRequest) -> Iterator[Section]:
    user = request.user
    if not user.has_perm(ANSWER_PERMISSION):
        return
    counts = pending_counts(user=user)  # type: ignore[arg-type]
    if not counts["all"]:
        # Four zeros say less than one sentence: what happens, and where.
        yield Section(
            key="requests",
            title=REQUESTS_TITLE,
            first_step=Step(NOTHING_PENDING, OPEN_INBOX, InboxFilter().url),
        )
        return
    figures = [
        Figure("requests-all", counts["all"], ALL_LABEL, InboxFilter().url),
        Figure("requests-mine", counts["mine"], MINE_LABEL, InboxFilter(mine=True).url),
        Figure("requests-skill", counts["skill"], SKILL_LABEL, InboxFilter(kind=RequestKind.SKILL).url),
        Figure("requests-tool", counts["tool"], TOOL_LABEL, InboxFilter(kind=RequestKind.TOOL).url),
    ]
    if counts["escalated"]:  # shown once there are some: most runtimes never send a request on (P2)
        sent = Figure(
            "requests-sent", counts["escalated"], SENT_LABEL, InboxFilter(escalated=True).url, help=SENT_HELP
        )
        figures.append(sent)
    yield Section(key="requests", title=REQUESTS_TITLE, figures=tuple(figures), help=REQUESTS_HELP)


def escalations_section(request: HttpRequest) -> Iterator[Section]:
    if not request.user.has_perm(AUDIT_PERMISSION):
        return
    limit = selectors.ESCALATED_IN_FORCE_LIMIT
    in_force = selectors.escalated_grants_in_force(limit=limit)
    link = reverse("audit:escalations")
    figure = Figure("escalated", in_force, ESCALATED_LABEL, link, limit=limit, help=ESCALATED_HELP)
    yield Section(key="audit", title=AUDIT_TITLE, figures=(figure,))
