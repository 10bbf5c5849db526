"""Verify now on the audit home (A2): under `make run` (Celery eager, no beat) the chain was
"Never verified" for good. Asking runs the beat's own task, with the person as its actor, and
the card shows the outcome; while a verification runs elsewhere, the card says so and polls
until its outcome is recorded.
"""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Iterator

import pytest
from django.core.cache import cache
from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.audit import tasks, verify_now
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.verification import VERIFICATION_ACTIONS, audit_chain_verify, last_verification
from aimon_admin.celery import app as celery_app
from aimon_admin.core.context import Channel
from tests.audit.helpers import execute
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def no_marker() -> Iterator[None]:
    verify_now.verification_forget()
    yield
    verify_now.verification_forget()
    cache.delete(tasks._RUNNING_KEY)


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def card(html: str) -> str:
    found = re.search(r'<section class="card" id="verification-card".*?</section>', html, re.S)
    assert found is not None, "no Chain verification card"
    return found.group(0)


def test_the_card_offers_verify_now_while_never_verified(auditor: User) -> None:
    shown = card(logged_in(auditor).get("/audit/").content.decode())
    assert "Never verified" in shown
    assert '<form method="post" action="/audit/verify/"' in shown
    assert "hx-trigger" not in shown  # nothing running: no polling


def test_verify_now_records_the_outcome_as_the_hourly_verification_does(auditor: User) -> None:
    # A2: the same task, the same event; the person who asked is its actor.
    response = logged_in(auditor).post("/audit/verify/", follow=True)
    assert response.redirect_chain == [("/audit/", 302)]
    html = response.content.decode()
    assert verify_now.VERIFIED_MESSAGE in html
    shown = card(html)
    assert "Verified" in shown
    assert "Never verified" not in shown
    event = AuditEvent.objects.get(action__in=VERIFICATION_ACTIONS)
    assert event.action == AuditAction.AUDIT_CHAIN_VERIFIED
    assert (event.actor, event.actor_label, event.channel) == (auditor, "audrey", Channel.TASK)
    assert event.request_id.startswith("task-")
    assert event.details["verified_through_seq"] == event.seq - 1
    assert event.details["problem"] == ""
    # A second ask verifies from the checkpoint the first one left.
    logged_in(auditor).post("/audit/verify/")
    newest = AuditEvent.objects.filter(action__in=VERIFICATION_ACTIONS).latest("seq")
    assert newest.details["mode"] == "from checkpoint"
    assert newest.details["started_after_seq"] == event.details["verified_through_seq"]


def test_verify_now_by_htmx_answers_with_the_card(operator: User) -> None:
    response = logged_in(operator).post("/audit/verify/", headers=HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section class="card" id="verification-card"')
    assert verify_now.VERIFIED_MESSAGE in html
    assert "Verified" in html


def test_a_broken_chain_is_reported_at_once(auditor: User, triggers_dropped: None) -> None:
    execute("UPDATE audit_auditevent SET subject = 'edited' WHERE seq = %s", [1])
    response = logged_in(auditor).post("/audit/verify/", follow=True)
    html = response.content.decode()
    last = last_verification()
    assert last is not None
    assert not last.ok
    assert verify_now.BROKEN_MESSAGE.format(problem=last.problem) in html
    assert "toast-error" in html
    assert "Broken" in card(html)
    event = AuditEvent.objects.get(action=AuditAction.AUDIT_CHAIN_BROKEN)
    assert (event.level, event.actor) == (AuditLevel.WARNING, auditor)


def test_while_another_verification_runs_the_card_waits_for_its_outcome(auditor: User) -> None:
    # A verification already running (a slow full walk on a worker): the one asked for stands
    # aside, as the task does for a beat that fired twice, and the card polls.
    assert cache.add(tasks._RUNNING_KEY, "1")
    client = logged_in(auditor)
    response = client.post("/audit/verify/", follow=True)
    assert verify_now.RUNNING_MESSAGE in response.content.decode()
    assert not AuditEvent.objects.filter(action__in=VERIFICATION_ACTIONS).exists()
    polling = card(client.get("/audit/verification/", headers=HTMX).content.decode())
    assert 'hx-get="/audit/verification/" hx-trigger="every 2s"' in polling
    assert "Verifying the chain, asked by audrey" in polling
    assert "Verify now</button>" not in polling  # one at a time

    cache.delete(tasks._RUNNING_KEY)
    audit_chain_verify(actor=TEST_ACTOR)  # the running one records its outcome
    done = card(client.get("/audit/verification/", headers=HTMX).content.decode())
    assert "hx-trigger" not in done
    assert "Verified" in done
    assert "Verify now" in done


@pytest.mark.parametrize("method", ["get", "post"])
def test_approvers_may_not_ask(approver: User, method: str) -> None:
    response = getattr(logged_in(approver), method)("/audit/verify/")
    assert response.status_code == (405 if method == "get" else 403)
    assert not AuditEvent.objects.filter(action__in=VERIFICATION_ACTIONS).exists()
    assert logged_in(approver).get("/audit/verification/").status_code == 403


def test_an_unreachable_task_queue_starts_nothing_and_says_so(
    auditor: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The outside world: a worker set-up (not eager) whose broker does not answer.
    monkeypatch.setitem(celery_app.conf, "task_always_eager", False)
    monkeypatch.setitem(celery_app.conf, "broker_url", "redis://127.0.0.1:1/0")  # nothing listens
    monkeypatch.setattr(celery_app.amqp, "_producer_pool", None)
    client = logged_in(auditor)
    html = html_lib.unescape(client.post("/audit/verify/", follow=True).content.decode())
    assert verify_now.NOT_QUEUED_MESSAGE in html
    assert not AuditEvent.objects.filter(action__in=VERIFICATION_ACTIONS).exists()
    shown = card(html)
    assert "hx-trigger" not in shown  # nothing pending: no polling for an outcome that never comes
    assert "Verify now</button>" in shown
