"""The request's own page: the card in full and its timeline (opened, notified, viewed,
answered), the reach next to every button, and a view that answers nothing (P1). Also the
card's Deny the rest… (was Dismiss…) and the Clear / Revoke confirmations, each saying what it
removes and what stays (S9, S10)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.utils.html import escape
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant, RequestView, Session
from aimon_admin.approvals.services import ToolCall, request_answer
from aimon_admin.approvals.services.request_views import request_answer_sent
from aimon_admin.approvals.services.tool_decisions import call_approval_use
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import services as notifications
from aimon_admin.notifications.choices import ChannelKind
from aimon_admin.runtimes.models import AgentRuntime
from tests.accounts.factories import logged_in
from tests.approvals.factories import open_skill_request, open_tool_request

pytestmark = pytest.mark.django_db


def page_of(client: Client, request: ApprovalRequest) -> str:
    response = client.get(f"/approvals/requests/{request.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def timeline(html: str) -> list[tuple[str, str]]:
    """(kind, text) of each timeline entry, in order, tags removed."""
    found = re.findall(r'<li data-kind="([a-z-]+)">(.*?)</li>', html, re.S)
    return [(kind, " ".join(re.sub(r"<[^>]+>", " ", body).split())) for kind, body in found]


def test_the_timeline_says_opened_viewed_and_each_answer_with_its_reach(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:
    request = open_skill_request(runtime, "deploy", "publish", session_id="s-1", principal="alice")
    request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION, skills=["deploy"])
    request_answer(request=request, user=operator, answer=Answer.ALLOW_AGENT, skills=["publish"])

    page_of(logged_in(approver), request)
    entries = timeline(page_of(logged_in(operator), request))

    kinds = [kind for kind, _ in entries]
    assert kinds[0] == "opened"
    assert "agent-one asked for alice." in entries[0][1]
    assert ("viewed", kinds.count("viewed")) == ("viewed", 2)
    first_view = next(text for kind, text in entries if kind == "viewed")
    assert "First viewed alice opened this page." in first_view
    answered = [text for kind, text in entries if kind == "answered"]
    assert any("alice answered deploy: Allow for this session, for this session." in t for t in answered)
    assert any(
        "olivia answered publish: Always allow for this agent, for every session of agent-one" in t
        for t in answered
    )


def test_the_timeline_shows_who_was_notified_through_notifications_selector(
    runtime: AgentRuntime,
    approver: User,
    operator: User,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # P1: alice's email channel is told when her request opens; the page reads it back
    # through notifications' own selector (core.timeline), approvals importing none of it.
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.AIMON_BASE_URL = "http://aimon.test"
    notifications.channel_add(
        owner=approver,
        kind=ChannelKind.EMAIL,
        name="work mail",
        target="alice@example.test",
        actor=Actor.system("t"),
    )
    with django_capture_on_commit_callbacks(execute=True):
        request = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    assert len(mail.outbox) == 1

    notified = [text for kind, text in timeline(page_of(logged_in(approver), request)) if kind == "notified"]
    assert notified == [notified[0]]
    assert "Told alice by email (work mail) that the request is waiting." in notified[0]
    # An operator reads every delivery, as in the delivery log.
    assert any(kind == "notified" for kind, _ in timeline(page_of(logged_in(operator), request)))


def test_someone_else_does_not_read_a_persons_deliveries(
    runtime: AgentRuntime,
    approver: User,
    operator: User,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Only operators read every delivery; alice reads her own (My deliveries), not olivia's.
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    notifications.channel_add(
        owner=operator,
        kind=ChannelKind.EMAIL,
        name="ops mail",
        target="olivia@example.test",
        actor=Actor.system("t"),
    )
    with django_capture_on_commit_callbacks(execute=True):
        # no principal: the operators are told
        request = open_skill_request(runtime, "deploy", principal=None)
    assert any(kind == "notified" for kind, _ in timeline(page_of(logged_in(operator), request)))
    ApprovalRequest.objects.filter(pk=request.pk).update(principal="alice")
    assert not any(kind == "notified" for kind, _ in timeline(page_of(logged_in(approver), request)))


def test_viewing_the_page_records_the_first_view_and_changes_nothing_of_the_request(
    runtime: AgentRuntime, approver: User
) -> None:
    # P1: a GET (a notification's link) answers nothing.
    request = open_skill_request(
        runtime, "deploy", "publish", session_id="s-1", principal="alice", turn_id="t-1"
    )

    def state() -> tuple[Any, ...]:
        row = ApprovalRequest.objects.values().get(pk=request.pk)
        items = list(ApprovalItem.objects.filter(request=request).order_by("id").values())
        return (row, items, Grant.objects.count(), AuditEvent.objects.count(), Session.objects.values().get())

    client = logged_in(approver)  # signing in is audited: before the snapshot
    before = state()
    page_of(client, request)
    first = RequestView.objects.get()
    page_of(client, request)

    assert state() == before
    assert RequestView.objects.get() == first  # the second visit leaves the first view as it was
    assert (first.viewer, first.request_id) == (approver, request.pk)


def test_every_button_has_its_reach_written_next_to_it(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:
    # S5: not only Always allow: Allow once, Allow for this session and Deny say where they hold.
    request = open_skill_request(
        runtime, "deploy", "publish", session_id="s-1", principal="alice", turn_id="t-1"
    )
    for client in (logged_in(operator),):
        for html in (page_of(client, request), client.get("/approvals/").content.decode()):
            buttons = re.findall(r'<button type="submit" class="btn btn-answer"[^>]*>', html)
            assert len(buttons) >= 8  # four answers for each skill, and the "all" row
            for button in buttons:
                target = re.search(r'aria-describedby="([^"]+)"', button)
                assert target, button
                described = re.search(rf'id="{target.group(1)}"[^>]*>(.*?)</(li|p)>', html, re.S)
                assert described, target.group(1)
                assert described.group(1).strip(), target.group(1)
            assert "This turn only (t-1), in session s-1." in html
            assert "Allows it in session s-1, until the session is cleared, revoked or idle too long." in html
            assert "Refuses it in session s-1; a Deny made now beats older approvals." in html


def test_a_sessionless_requests_session_answer_says_it_reaches_every_session(
    runtime: AgentRuntime, operator: User
) -> None:
    # S6: with no session, Allow for this session is written agent-wide: its reach says so.
    html = page_of(
        logged_in(operator), open_skill_request(runtime, "rotate-keys", session_id=None, principal=None)
    )
    line = re.search(r'id="reach-[^"]+-ALLOW_SESSION">(.*?)</li>', html, re.S)
    assert line
    assert "every session of agent-one (this request has no session" in line.group(1)


def test_the_title_links_to_the_request_page_from_the_inbox_but_not_on_it(
    runtime: AgentRuntime, approver: User
) -> None:
    request = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    link = f'<a href="/approvals/requests/{request.pk}/">agent-one</a>'
    client = logged_in(approver)
    assert link in client.get("/approvals/").content.decode()
    assert link not in page_of(client, request)


def test_a_call_used_on_its_own_shows_when_the_runtime_used_it(runtime: AgentRuntime, approver: User) -> None:
    # U4: the one moment the page knows the runtime had the answer.
    arguments = {"command": "git push origin main"}
    request = open_tool_request(runtime, "Bash", arguments, session_id="s-1", principal="alice")
    request_answer(request=request, user=approver, answer=Answer.ALLOW_CALL)
    kinds = [kind for kind, _ in timeline(page_of(logged_in(approver), request))]
    assert "used" not in kinds
    call = ToolCall(tool="Bash", approval_id=request.pk)
    used = call_approval_use(runtime, call, request.arguments_digest, request.session_id, None)
    assert used
    entries = timeline(page_of(logged_in(approver), request))
    assert entries[-1][0] == "used"
    assert any(
        kind == "answered" and "Allow this call, for this call only, with exactly these arguments" in text
        for kind, text in entries
    )


def test_the_answer_read_by_the_runtime_is_on_the_timeline_once(
    runtime: AgentRuntime, approver: User, api: APIClient
) -> None:
    # When the runtime was sent the answer. A read while pending records nothing; the first
    # read after the answer does ("Answer sent": it was not waiting then); later reads leave
    # that time as it was.
    request = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    assert api.get(f"/api/v1/approval-requests/{request.pk}").json()["status"] == "PENDING"
    assert ApprovalRequest.objects.get(pk=request.pk).answer_sent_at is None

    request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION)
    assert api.get(f"/api/v1/approval-requests/{request.pk}").json()["status"] == "ANSWERED"
    sent = ApprovalRequest.objects.get(pk=request.pk)
    assert sent.answer_sent_at is not None
    assert sent.answer_sent_to_waiter is False
    api.get(f"/api/v1/approval-requests/{request.pk}?wait=0")
    assert ApprovalRequest.objects.get(pk=request.pk).answer_sent_at == sent.answer_sent_at

    html = page_of(logged_in(approver), request)
    assert "Woken is when the runtime was sent the answer" in html  # the page says what it means
    entries = timeline(html)
    woken = [text for kind, text in entries if kind == "woken"]
    assert len(woken) == 1
    assert "Answer sent agent-one was sent the request answered when it next asked" in woken[0]
    kinds = [kind for kind, _ in entries]
    assert kinds.index("answered") < kinds.index("woken") < kinds.index("viewed")  # oldest first


def test_a_runtime_woken_by_the_answer_reads_woken(runtime: AgentRuntime, approver: User) -> None:
    # The long-poll that was waiting records waited=True (test_longpoll); the page words it,
    # with how the request closed.
    request = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION)
    request_answer_sent(request=ApprovalRequest.objects.get(pk=request.pk), waited=True)
    woken = [text for kind, text in timeline(page_of(logged_in(approver), request)) if kind == "woken"]
    assert len(woken) == 1
    assert (
        "Woken agent-one was waiting on this request: its wait returned with the request answered."
        in woken[0]
    )


# --- Deny the rest… (was Dismiss…) ----------------------------------------------------------------


def test_deny_the_rest_is_named_for_what_it_does_and_keeps_the_answers_given(
    runtime: AgentRuntime, approver: User
) -> None:
    # S9: it denies every unanswered skill for the session, never agent-wide.
    request = open_skill_request(runtime, "deploy", "publish", session_id="s-1", principal="alice")
    request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION, skills=["deploy"])
    client = logged_in(approver)
    inbox = client.get("/approvals/").content.decode()
    assert f'href="/approvals/requests/{request.pk}/dismiss/">Deny the rest…</a>' in inbox
    assert "Dismiss" not in inbox

    confirm = client.get(f"/approvals/requests/{request.pk}/dismiss/").content.decode()
    assert "<h1>Deny the rest of this request?</h1>" in confirm
    assert (
        "Each skill not yet answered is denied for this session (never agent-wide), and the request "
        "is closed." in confirm
    )
    assert "<li>publish</li>" in confirm
    assert "Answers already given stay as they are: deploy." in confirm
    assert ">Deny the rest</button>" in confirm

    response = client.post(f"/approvals/requests/{request.pk}/dismiss/", follow=True)
    assert "The rest denied" in response.content.decode()
    grants = {(g.skill, g.decision, g.scope, g.origin) for g in Grant.objects.active()}
    assert grants == {("deploy", "ALLOW", "SESSION", "ANSWER"), ("publish", "DENY", "SESSION", "ABORT")}


def test_deny_the_rest_is_offered_only_where_there_is_a_rest(runtime: AgentRuntime, approver: User) -> None:
    # One call, or one skill, has its own Deny beside it: "the rest" would be that same one.
    one_call = open_tool_request(runtime, "Bash", {"command": "ls"}, session_id="s-1", principal="alice")
    one_skill = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    two_skills = open_skill_request(runtime, "deploy", "publish", session_id="s-2", principal="alice")
    inbox = logged_in(approver).get("/approvals/").content.decode()
    assert f'href="/approvals/requests/{two_skills.pk}/dismiss/"' in inbox
    assert f'href="/approvals/requests/{one_skill.pk}/dismiss/"' not in inbox
    assert f'href="/approvals/requests/{one_call.pk}/dismiss/"' not in inbox


# --- Clear and revoke: what each removes, what stays (S10) --------------------------------------


def test_clear_and_revoke_confirmations_each_say_what_they_remove_and_what_stays(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:
    request = open_skill_request(runtime, "deploy", "publish", session_id="s-1", principal="alice")
    request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION, skills=["deploy"])
    request_answer(request=request, user=operator, answer=Answer.ALLOW_AGENT, skills=["publish"])
    session = Session.objects.get()
    client = logged_in(approver)

    clear = client.get(f"/approvals/sessions/{session.pk}/clear/").content.decode()
    revoke = client.get(f"/approvals/sessions/{session.pk}/revoke/").content.decode()

    assert escape("Starts this session over, as the agent's own /clear does.") in clear
    assert "Removes the 1 answer this session holds" in clear
    assert "The audit log records it as a clear." in clear
    assert "Takes back the 1 answer this session holds" in revoke
    assert "the audit log records a revocation by you, not a clear" in revoke
    for html in (clear, revoke):
        assert "Stays: the agent-wide approvals of agent-one" in html
        assert "the rules, and the audit log" in html
    assert "only Revoke agent-wide removes them" in revoke
    assert "<li>deploy: Allow for this session</li>" in clear
    assert "<li>deploy: Allow for this session</li>" in revoke
