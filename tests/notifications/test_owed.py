"""What a request owes is owed from its commit (P2: nothing lost).

Each test opens, answers or escalates a request and lets nothing run after the commit (in
these tests' transaction, `on_commit` work never runs): as if Redis had been down, so the
hint to the worker was lost. Beat's sweep must still send every message owed, whatever
became of the request meanwhile. A real webhook receiver checks what arrives.
"""

from __future__ import annotations

import pytest
from django.db import transaction
from standardwebhooks.webhooks import Webhook

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import RequestInput, request_answer, request_create
from aimon_admin.approvals.services.escalation import request_escalate_if_due
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import services, tasks
from aimon_admin.notifications.models import Fanout
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_update_settings
from tests.notifications.conftest import later
from tests.notifications.receivers import HttpReceiver, http_receiver

pytestmark = pytest.mark.django_db

OPS = Actor.system("pytest")


def opened(runtime: AgentRuntime) -> ApprovalRequest:
    """Alice's request, opened as the API opens it; nothing after its commit runs."""
    request, _ = request_create(
        RequestInput(runtime=runtime, skills=["deploy"], session_id="s-1", principal="alice")
    )
    return request


def received(receiver: HttpReceiver, secret: str, count: int) -> list[tuple[str, str]]:
    got = receiver.wait(count, timeout=3)
    return sorted(
        (payload["type"], payload["data"]["request"]["id"])
        for payload in (Webhook(secret).verify(g.body, g.headers) for g in got)
    )


def owed(request: ApprovalRequest) -> list[str]:
    """The request's events not yet turned into deliveries."""
    rows = Fanout.objects.filter(request=request, fanned_out_at__isnull=True)
    return sorted(rows.values_list("event", flat=True))


def test_a_request_answered_before_anything_ran_after_its_opening_gets_both_messages(
    runtime: AgentRuntime, approver: User
) -> None:
    # P2: neither the opening's hint nor the answer's reached the worker. The request is no
    # longer pending when the sweep runs: it is told all the same, approval.requested and
    # approval.answered, each once.
    with http_receiver() as receiver:
        _hook, secret = services.webhook_create(name="hook", url=receiver.url(), actor=OPS)
        request = opened(runtime)
        request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION)
        with later(60):
            tasks.sweep.apply().get()
            tasks.sweep.apply().get()
        got = received(receiver, secret, 2)
        receiver.wait(3, timeout=0.5)
    assert got == [("approval.answered", str(request.pk)), ("approval.requested", str(request.pk))]
    assert len(receiver.got) == 2


def test_a_request_escalated_then_answered_before_anything_ran_gets_all_three(
    runtime: AgentRuntime, approver: User, other_approver: User
) -> None:
    # P2: escalated on sight (the inbox showed it past its time; its hint lost too), then
    # answered, all before the sweep ran.
    runtime_update_settings(
        runtime=runtime,
        ceiling=runtime.ceiling,
        exempt_at_or_below=runtime.exempt_at_or_below,
        owner=other_approver,
        description="",
        escalate_after_seconds=60,
        actor=OPS,
    )
    runtime.refresh_from_db()
    with http_receiver() as receiver:
        _hook, secret = services.webhook_create(name="hook", url=receiver.url(), actor=OPS)
        request = opened(runtime)
        with later(90):
            assert request_escalate_if_due(request)
        request_answer(request=request, user=approver, answer=Answer.DENY)
        with later(180):
            tasks.sweep.apply().get()
        got = received(receiver, secret, 3)
    assert got == [
        ("approval.answered", str(request.pk)),
        ("approval.escalated", str(request.pk)),
        ("approval.requested", str(request.pk)),
    ]


def test_what_a_request_owes_commits_with_it_or_not_at_all(runtime: AgentRuntime, approver: User) -> None:
    # P2: written in the transaction that opened it (its answer's message too, due once it
    # closes); none when that rolled back.
    def failing_change() -> None:
        with transaction.atomic():
            request_create(RequestInput(runtime=runtime, skills=["deploy"], session_id="s-1"))
            raise RuntimeError("the change fails")

    with pytest.raises(RuntimeError):
        failing_change()
    assert not Fanout.objects.exists()
    request = opened(runtime)
    assert owed(request) == ["ANSWERED", "REQUESTED"]
    with later(60):
        assert tasks.sweep.apply().get()["owed"] == 1  # the opening's; the answer's waits
    assert owed(request) == ["ANSWERED"]
    request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION)
    with later(60):
        tasks.sweep.apply().get()
    assert owed(request) == []


def test_a_request_answered_when_it_opened_owes_nothing(runtime: AgentRuntime, approver: User) -> None:
    # Decided by a grant at once (S4): nobody is asked, nothing is sent.
    first = opened(runtime)
    request_answer(request=first, user=approver, answer=Answer.ALLOW_SESSION)
    again = opened(runtime)
    again.refresh_from_db()
    assert again.status == "ANSWERED"
    assert owed(again) == []
