"""`benchmarks/audit_generate_load.py` writes a realistic data set whose chain verifies.

Small numbers, on whichever database the suite runs on: SQLite takes the executemany
path, PostgreSQL the COPY path.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import F, Max, Sum
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant, Session
from aimon_admin.audit import merkle, tree
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.verification import audit_chain_check
from benchmarks.audit_generate_load import NOT_EMPTY_MESSAGE, REAL_DATA_MESSAGE, Command

pytestmark = pytest.mark.django_db

EVENTS, SESSIONS = 4000, 400


def generate(*extra: str, events: int = EVENTS, sessions: int = SESSIONS) -> str:
    out = StringIO()
    call_command(
        Command(),
        "--events",
        str(events),
        "--sessions",
        str(sessions),
        "--runtimes",
        "4",
        "--seed",
        "7",
        "--batch",
        "500",
        *extra,
        stdout=out,
    )
    return out.getvalue()


@pytest.fixture
def generated() -> str:
    return generate()


def test_it_writes_exactly_the_events_asked_for_and_the_chain_verifies(generated: str) -> None:  # A2
    assert AuditEvent.objects.count() == EVENTS
    assert f"generated {EVENTS:,} audit events (seq 1..{EVENTS})" in generated
    result = audit_chain_check(full=True)
    assert (result.ok, result.verified_through_seq) == (True, EVENTS)
    out = StringIO()
    call_command("verify_audit", stdout=out)
    assert f"audit chain OK: {EVENTS} events verified" in out.getvalue()


def test_it_builds_the_merkle_tree_of_what_it_wrote(generated: str) -> None:  # A4
    frontier = merkle.Frontier()
    for event in AuditEvent.objects.order_by("seq").iterator():
        frontier.push(merkle.event_leaf(event.content()))
    assert tree.size() == EVENTS
    assert tree.root(EVENTS) == frontier.root()


def test_event_times_never_go_back_along_the_chain(generated: str) -> None:  # A2
    times = list(AuditEvent.objects.order_by("seq").values_list("created_at", flat=True))
    assert times == sorted(times)
    assert (times[-1] - times[0]).days >= 75  # about 90 days of history


def test_it_writes_the_sessions_and_a_realistic_mix_of_outcomes(generated: str) -> None:  # S4 S6 S9 S10
    assert Session.objects.count() == SESSIONS
    statuses = Counter(ApprovalRequest.objects.values_list("status", flat=True))
    assert statuses["ANSWERED"] > statuses["EXPIRED"] > 0
    assert statuses["CANCELLED"] > 0
    grants = Counter(Grant.objects.values_list("scope", "origin"))
    for key in [("TURN", "ANSWER"), ("SESSION", "ANSWER"), ("AGENT", "ANSWER"), ("AGENT", "ESCALATION")]:
        assert grants[key] > 0, key
    assert grants[("SESSION", "ABORT")] > 0
    reasons = Counter(Grant.objects.exclude(revoke_reason="").values_list("revoke_reason", flat=True))
    assert {"SINGLE", "CLEAR", "EXPIRED", "REVOKE_AGENT"} <= set(reasons)
    actions = Counter(AuditEvent.objects.values_list("action", flat=True))
    for action in [
        "SKILL_GRANTED",
        "SKILL_GRANT_ESCALATED",
        "SKILL_ABORT_DENIED",
        "SESSION_CLEARED",
        "GRANT_REVOKED",
        "AGENT_GRANTS_REVOKED",
        "SESSION_EXPIRED",
        "LOGIN_SUCCEEDED",
        "LOGIN_FAILED",
        "MCP_SYNC_SUCCEEDED",
    ]:
        assert actions[action] > 0, action


def test_every_grant_event_names_a_grant_that_says_the_same(generated: str) -> None:  # A1 S6
    grants = {g.pk: g for g in Grant.objects.select_related("session")}
    events = AuditEvent.objects.filter(action__in=["SKILL_GRANTED", "SKILL_GRANT_ESCALATED"])
    for event in events:
        grant = grants[event.details["grant_id"]]
        assert (grant.skill, grant.scope, grant.decision) == (
            event.subject,
            event.details["scope"],
            event.details["decision"],
        )
        assert grant.runtime_id == event.runtime_id
        assert grant.granted_by_id == event.actor_id
        escalated = event.action == "SKILL_GRANT_ESCALATED"
        assert (grant.origin == "ESCALATION") == escalated
        assert (event.level == "WARNING") == escalated
        if escalated:
            assert grant.scope == "AGENT"
            assert grant.session_id is None
            assert event.details["survives_clear"] is True
    assert events.count() == Grant.objects.exclude(origin="ABORT").count()


def test_revocation_events_count_what_they_revoked(generated: str) -> None:  # S10 A1
    def removed(action: str, key: str) -> int:
        return sum(e.details[key] for e in AuditEvent.objects.filter(action=action))

    assert (
        AuditEvent.objects.filter(action="GRANT_REVOKED").count()
        == Grant.objects.filter(revoke_reason="SINGLE").count()
    )
    assert removed("SESSION_CLEARED", "removed") == Grant.objects.filter(revoke_reason="CLEAR").count()
    assert removed("SESSION_EXPIRED", "removed") == Grant.objects.filter(revoke_reason="EXPIRED").count()
    assert (
        removed("SESSION_REVOKED", "removed_session") == Grant.objects.filter(revoke_reason="REVOKE").count()
    )
    assert (
        removed("AGENT_GRANTS_REVOKED", "removed_agent") + removed("SESSION_REVOKED", "removed_agent")
        == Grant.objects.filter(revoke_reason="REVOKE_AGENT").count()
    )


def test_answered_requests_have_every_item_decided_and_pending_ones_none(generated: str) -> None:  # S7
    answered = ApprovalItem.objects.filter(request__status="ANSWERED")
    assert answered.exists()
    assert not answered.filter(decision="").exists()
    assert not ApprovalItem.objects.filter(request__status="PENDING").exclude(decision="").exists()


# With few sessions per event, the generator once ran its requests up to three days past the
# moment it was run, answered before they were made.
@pytest.fixture(params=[SESSIONS, 100], ids=["usual", "few-sessions"])
def generated_before(request: pytest.FixtureRequest) -> tuple[str, dt.datetime]:
    """A generated data set and the moment just before it was generated."""
    before = timezone.now()
    return generate(sessions=request.param), before


def test_time_never_goes_backwards_for_any_row(generated_before: tuple[str, dt.datetime]) -> None:  # A1 S7
    requests = ApprovalRequest.objects.all()
    assert not requests.filter(answered_at__lt=F("created_at")).exists()
    assert not requests.filter(closed_at__lt=F("created_at")).exists()
    assert requests.filter(answered_at__isnull=False).count() > 100
    # A grant is written by an answer (or an abort) to its request: at that answer's time, after
    # the request was made, and no later than the request closed with its last skill's answer.
    items = ApprovalItem.objects.filter(grant__isnull=False)
    assert items.count() == Grant.objects.count()
    assert not items.filter(answered_at__lt=F("request__created_at")).exists()
    assert not items.exclude(grant__created_at=F("answered_at")).exists()
    answered = Grant.objects.filter(request__answered_at__isnull=False)
    assert not answered.filter(created_at__gt=F("request__answered_at")).exists()
    assert not Grant.objects.filter(created_at__lt=F("request__created_at")).exists()
    revoked = Grant.objects.filter(revoked_at__isnull=False)
    assert revoked.count() > 100
    assert not revoked.filter(revoked_at__lte=F("created_at")).exists()
    sessions = Session.objects.all()
    assert not sessions.filter(last_seen_at__lt=F("first_seen_at")).exists()
    assert not ApprovalRequest.objects.filter(session__first_seen_at__gt=F("created_at")).exists()


def test_nothing_lies_in_the_future_of_the_moment_it_was_generated(
    generated_before: tuple[str, dt.datetime],
) -> None:  # A1
    _, before = generated_before
    latest = [
        AuditEvent.objects.aggregate(m=Max("created_at"))["m"],
        Session.objects.aggregate(m=Max("last_seen_at"))["m"],
        *ApprovalRequest.objects.aggregate(Max("created_at"), Max("answered_at"), Max("closed_at")).values(),
        ApprovalItem.objects.aggregate(m=Max("answered_at"))["m"],
        *Grant.objects.aggregate(Max("created_at"), Max("revoked_at")).values(),
    ]
    assert all(moment is not None and moment <= before for moment in latest), (before, latest)
    # ... and the history runs up to that moment, with no empty stretch at its end.
    assert before - latest[0] < dt.timedelta(hours=12)
    assert before - latest[2] < dt.timedelta(days=1)
    week = ApprovalRequest.objects.filter(created_at__gte=before - dt.timedelta(days=7)).count()
    assert week > ApprovalRequest.objects.count() * 7 / 90 / 2


def test_it_continues_the_chain_from_the_current_head(five_events: list[AuditEvent]) -> None:  # A2
    generate(events=500, sessions=50)

    assert AuditEvent.objects.count() == 505
    assert AuditEvent.objects.get(seq=6).prev_hash == five_events[-1].hash
    assert audit_chain_check(full=True).ok


def test_it_refuses_a_database_with_people_it_did_not_create(
    make_user: Callable[..., User],
) -> None:  # A2: a benchmark tool never mixes into real data
    make_user("alice")

    with pytest.raises(CommandError) as refused:
        generate(events=300, sessions=20)

    assert str(refused.value) == REAL_DATA_MESSAGE
    assert not Session.objects.exists()
    generate("--force", events=300, sessions=20)
    assert Session.objects.count() == 20


def test_it_refuses_to_add_to_a_populated_database_without_yes() -> None:  # A2
    generate(events=300, sessions=20)

    with pytest.raises(CommandError) as refused:
        generate(events=300, sessions=20)

    assert str(refused.value) == NOT_EMPTY_MESSAGE.format(limit=1000)
    generate("--yes", events=300, sessions=20)
    assert AuditEvent.objects.count() == 600
    assert Session.objects.count() == 40
    assert audit_chain_check(full=True).ok


def test_too_few_events_for_the_people_and_runtimes_is_refused() -> None:
    with pytest.raises(CommandError, match="--events must be at least"):
        generate(events=5, sessions=10)
    assert not AuditEvent.objects.exists()


def test_the_audit_queryset_still_refuses_bulk_create() -> None:  # A2: only this command may
    from aimon_admin.audit.models import AppendOnlyError

    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.bulk_create([])
    assert Grant.objects.aggregate(n=Sum("id"))["n"] is None
