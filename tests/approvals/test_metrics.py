"""What approvals count, read back from a real scrape of /metrics: decisions by kind,
decision and source, with one timing per call; requests opened, answered (and how long they
waited), cancelled, expired and escalated (P2, and S6's agent-wide answers); the requests
waiting now; the long-polls waiting now. Each count moves by exactly what happened."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer, RequestStatus
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import request_answer, request_cancel, request_expire_if_due
from aimon_admin.approvals.services.escalation import request_escalate_if_due
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.authzen_client import PUSH, request, tool
from tests.approvals.factories import api_decide_skills, open_skill_request
from tests.core.metrics_support import moved, scrape

pytestmark = pytest.mark.django_db

DECISIONS = "aimon_decisions_total"
CALLS = "aimon_decision_duration_seconds_count"


def test_each_decision_is_counted_once_by_kind_decision_and_source_and_each_call_timed_once(
    api: APIClient, runtime: AgentRuntime, operator: User
) -> None:
    standing = open_skill_request(runtime, "deploy")
    request_answer(request=standing, user=operator, answer=Answer.ALLOW_AGENT)
    before = scrape()

    skills = api_decide_skills(api, ["deploy", "drop-database"], session_id="s-1", principal="alice")
    assert skills.status_code == 200
    assert skills.json()["decisions"] == [
        {"skill": "deploy", "decision": "ALLOW", "source": "AGENT"},
        {"skill": "drop-database", "decision": "ASK", "source": "DEFAULT"},
    ]
    called = api.post(
        "/api/v1/tool-decisions",
        {"tool": "Bash", "arguments": PUSH, "session_id": "s-1", "principal": "alice"},
        format="json",
    )
    assert (called.status_code, called.json()["decision"], called.json()["source"]) == (200, "ASK", "GATE")
    # AuthZEN's evaluation is the same tool decision, counted at the same place.
    evaluated = api.post("/access/v1/evaluation", request(tool("Bash", arguments=PUSH)), format="json")
    assert evaluated.json()["context"]["source"] == "GATE"  # unattended: DENY
    after = scrape()

    assert moved(before, after, DECISIONS, kind="SKILL", decision="ALLOW", source="AGENT") == 1
    assert moved(before, after, DECISIONS, kind="SKILL", decision="ASK", source="DEFAULT") == 1
    assert moved(before, after, DECISIONS, kind="TOOL", decision="ASK", source="GATE") == 1
    assert moved(before, after, DECISIONS, kind="TOOL", decision="DENY", source="GATE") == 1
    assert after.total(DECISIONS) - before.total(DECISIONS) == 4
    assert moved(before, after, CALLS, kind="SKILL") == 1  # one call, two skills
    assert moved(before, after, CALLS, kind="TOOL") == 2
    # Each call's time is in the histogram's buckets (le="+Inf" holds every one).
    assert moved(before, after, "aimon_decision_duration_seconds_bucket", kind="TOOL", le="+Inf") == 2
    assert moved(before, after, "aimon_decision_duration_seconds_sum", kind="SKILL") > 0


def test_a_refused_call_is_no_decision(api: APIClient) -> None:
    before = scrape()
    refused = api_decide_skills(api, ["deploy"], session_id="s-1", invoking_session_id="never-seen")
    assert refused.status_code == 400  # S3
    after = scrape()
    assert after.total(DECISIONS) == before.total(DECISIONS)
    assert after.total(CALLS) == before.total(CALLS)


def test_requests_are_counted_as_they_open_are_answered_cancelled_expire_and_escalate(
    runtime: AgentRuntime,
    operator: User,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    before = scrape()
    with django_capture_on_commit_callbacks(execute=True):
        answered = open_skill_request(runtime, "deploy")
        cancelled = open_skill_request(runtime, "restart")
        expiring = open_skill_request(runtime, "migrate")
        sent = open_skill_request(runtime, "rollback")
    opened = scrape()
    assert moved(before, opened, "aimon_approval_requests_opened_total", kind="SKILL") == 4
    assert moved(before, opened, "aimon_approval_requests_pending", kind="SKILL") == 4

    # Answered nine minutes after it opened: one answer, its wait in the histogram's 600 s bucket.
    nine_minutes_ago = timezone.now() - dt.timedelta(minutes=9)
    ApprovalRequest.objects.filter(pk=answered.pk).update(created_at=nine_minutes_ago)
    with django_capture_on_commit_callbacks(execute=True):
        request_answer(request=answered, user=operator, answer=Answer.ALLOW_SESSION)
        request_cancel(request=cancelled, actor=Actor.for_runtime(runtime))
        due = timezone.now() - dt.timedelta(seconds=1)
        ApprovalRequest.objects.filter(pk=expiring.pk).update(expires_at=due)
        assert request_expire_if_due(ApprovalRequest.objects.get(pk=expiring.pk))
        AgentRuntime.objects.filter(pk=runtime.pk).update(escalate_after_seconds=60)
        two_minutes_ago = timezone.now() - dt.timedelta(minutes=2)
        ApprovalRequest.objects.filter(pk=sent.pk).update(created_at=two_minutes_ago)
        late = ApprovalRequest.objects.select_related("runtime").get(pk=sent.pk)
        assert request_escalate_if_due(late)  # P2
    after = scrape()

    assert moved(opened, after, "aimon_approval_requests_answered_total", kind="SKILL") == 1
    assert moved(opened, after, "aimon_approval_requests_cancelled_total", kind="SKILL") == 1
    assert moved(opened, after, "aimon_approval_requests_expired_total", kind="SKILL") == 1
    assert moved(opened, after, "aimon_approval_requests_escalated_total", kind="SKILL") == 1
    assert moved(opened, after, "aimon_approval_scope_escalations_total", kind="SKILL") == 0
    assert moved(opened, after, "aimon_approval_answer_wait_seconds_count", kind="SKILL") == 1
    assert moved(opened, after, "aimon_approval_answer_wait_seconds_bucket", kind="SKILL", le="300.0") == 0
    assert moved(opened, after, "aimon_approval_answer_wait_seconds_bucket", kind="SKILL", le="600.0") == 1
    # Only the escalated one still waits.
    assert after.value("aimon_approval_requests_pending", kind="SKILL") == 1
    assert ApprovalRequest.objects.filter(status=RequestStatus.PENDING).count() == 1


def test_a_session_answer_with_no_session_is_counted_as_a_scope_escalation(
    runtime: AgentRuntime, operator: User, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:  # S6
    request = open_skill_request(runtime, "deploy", session_id=None, principal=None)
    before = scrape()
    with django_capture_on_commit_callbacks(execute=True):
        request_answer(request=request, user=operator, answer=Answer.ALLOW_SESSION)
    after = scrape()
    assert moved(before, after, "aimon_approval_scope_escalations_total", kind="SKILL") == 1
    assert moved(before, after, "aimon_approval_requests_answered_total", kind="SKILL") == 1


def test_an_answer_that_rolls_back_counts_nothing(runtime: AgentRuntime, operator: User) -> None:
    request = open_skill_request(runtime, "deploy", session_id=None, principal=None)
    before = scrape()
    # The test's transaction never commits: what was written is rolled back, and not counted.
    request_answer(request=request, user=operator, answer=Answer.ALLOW_SESSION)
    after = scrape()
    assert moved(before, after, "aimon_approval_scope_escalations_total", kind="SKILL") == 0
    assert moved(before, after, "aimon_approval_requests_answered_total", kind="SKILL") == 0


@pytest.mark.django_db(transaction=True)
def test_a_waiting_long_poll_is_in_the_gauge_until_it_returns(
    runtime: AgentRuntime, runtime_token: str, operator: User
) -> None:
    waiting = open_skill_request(runtime, "deploy")
    assert scrape().value("aimon_long_polls_waiting") == 0
    answers: list[int] = []

    def poll() -> None:
        response = Client().get(
            f"/api/v1/approval-requests/{waiting.pk}?wait=20", HTTP_AUTHORIZATION=f"Bearer {runtime_token}"
        )
        answers.append(response.status_code)

    poller = threading.Thread(target=poll)
    poller.start()
    deadline = time.monotonic() + 10
    while scrape().value("aimon_long_polls_waiting") != 1:
        assert time.monotonic() < deadline, "the long-poll never counted as waiting"
        time.sleep(0.05)
    request_answer(request=waiting, user=operator, answer=Answer.ALLOW_SESSION)
    poller.join(15)
    assert answers == [200]
    assert scrape().value("aimon_long_polls_waiting") == 0
