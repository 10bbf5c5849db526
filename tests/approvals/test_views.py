"""The approval pages: inbox, answers, sessions and revocation, agent-wide approvals,
rules — for every role (S5, S10, S13)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from aimon_admin.accounts.models import User
from aimon_admin.approvals import policy, selectors
from aimon_admin.approvals.choices import Answer, ItemScope, RequestStatus
from aimon_admin.approvals.models import ApprovalRequest, Grant, SkillRule
from aimon_admin.approvals.services import (
    request_answer,
)
from aimon_admin.approvals.services.errors import (
    AGENT_WIDE_ENDS,
    SETTLED_DENY_STANDS_MESSAGE,
    STANDING_ANSWER_REFUSED_MESSAGE,
)
from aimon_admin.approvals.views import DENY_REQUEST_ONLY_HELP
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_create, runtime_update_settings
from tests.accounts.factories import logged_in
from tests.approvals.factories import open_skill_request
from tests.conftest import TEST_ACTOR
from tests.core.prg_support import assert_invalid_post_redirects_and_reloads

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


def test_each_person_sees_only_their_own_requests(
    runtime: AgentRuntime, approver: User, other_approver: User, operator: User
) -> None:
    # S13: a request belongs to its principal; operators see all.
    mine = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    theirs = open_skill_request(runtime, "notify", session_id="s-2", principal="bob")
    alice = logged_in(approver).get("/approvals/").content.decode()
    assert str(mine.pk) in alice
    assert str(theirs.pk) not in alice
    everything = logged_in(operator).get("/approvals/").content.decode()
    assert str(mine.pk) in everything
    assert str(theirs.pk) in everything


def test_principal_less_requests_go_to_operators_and_the_owner(
    runtime: AgentRuntime, approver: User, other_approver: User
) -> None:
    # S13: no principal → operators and the runtime's owner.
    request = open_skill_request(runtime, "backup", session_id=None, principal=None)
    assert str(request.pk) not in logged_in(approver).get("/approvals/").content.decode()
    runtime_update_settings(
        runtime=runtime,
        ceiling=runtime.ceiling,
        exempt_at_or_below=runtime.exempt_at_or_below,
        owner=approver,
        description="",
        actor=TEST_ACTOR,
    )
    assert str(request.pk) in logged_in(approver).get("/approvals/").content.decode()
    assert str(request.pk) not in logged_in(other_approver).get("/approvals/").content.decode()


def test_auditors_answer_nothing(runtime: AgentRuntime, auditor: User) -> None:
    request = open_skill_request(runtime, "deploy", session_id="s-1", principal=None)
    client = logged_in(auditor)
    assert client.get("/approvals/").status_code == 403
    response = client.post(f"/approvals/requests/{request.pk}/answer/", {"answer": "ALLOW_SESSION"})
    assert response.status_code == 403
    assert not Grant.objects.exists()


def test_anonymous_visitors_are_sent_to_sign_in(client: Client) -> None:
    response = client.get("/approvals/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_buttons_carry_the_fixed_labels_and_the_reach_of_always(
    runtime: AgentRuntime, operator: User
) -> None:
    # S5: the reach is stated before the click; docs/concepts.md fixes the labels.
    open_skill_request(runtime, "deploy", "notify", session_id="s-1", turn_id="t-1", principal="olivia")
    open_skill_request(runtime, "other", session_id="s-2", principal=None)
    html = logged_in(operator).get("/approvals/").content.decode()
    labels = re.findall(r'<button type="submit" class="btn btn-answer"[^>]*>([^<]+)</button>', html)
    assert labels[:4] == ["Allow once", "Allow for this session", "Always allow for this agent", "Deny"]
    assert "Allow for this session — all" in labels
    reach = "Always allow for this agent</strong> reaches every session of agent-one: the 2 sessions"
    assert reach in html
    assert "never expires, survives <em>Clear session</em>" in html
    # An agent-wide grant can be revoked on its own too; the words say so.
    assert f"holds {AGENT_WIDE_ENDS}." in html
    assert "removed only by" not in html


def test_allow_once_is_offered_only_with_a_turn(runtime: AgentRuntime, operator: User) -> None:
    open_skill_request(runtime, "deploy", session_id="s-1", principal=None)
    html = logged_in(operator).get("/approvals/").content.decode()
    assert ">Allow once<" not in html


def test_always_allow_is_not_offered_to_an_approver_who_does_not_own_the_runtime(
    runtime: AgentRuntime, approver: User
) -> None:
    # S13: agent scope only for operators and the owner; the button is absent …
    request = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    client = logged_in(approver)
    assert "Always allow for this agent" not in client.get("/approvals/").content.decode()
    # … and the server refuses a crafted POST.
    response = client.post(
        f"/approvals/requests/{request.pk}/answer/", {"answer": "ALLOW_AGENT", "skill": "deploy"}
    )
    assert response.status_code == 403
    assert not Grant.objects.exists()


def test_an_escalating_request_warns_that_a_session_answer_becomes_agent_wide(
    runtime: AgentRuntime, operator: User
) -> None:
    # S6 shown before the click.
    open_skill_request(runtime, "backup", session_id=None, principal=None)
    html = logged_in(operator).get("/approvals/").content.decode()
    assert "A session answer here, Deny included, becomes <strong>agent-wide</strong>" in html
    assert f"holds {AGENT_WIDE_ENDS}." in html


def test_a_fork_request_says_so(runtime: AgentRuntime, operator: User) -> None:
    open_skill_request(runtime, "write", session_id="s-1", principal=None)  # the invoking session exists (S3)
    open_skill_request(runtime, "read", invoking_session_id="s-1", session_id=None, principal=None)
    html = logged_in(operator).get("/approvals/").content.decode()
    assert "comes from a sub-agent (fork) of session" in html


def test_answering_by_htmx_writes_the_grant_and_returns_the_card(
    runtime: AgentRuntime, approver: User
) -> None:
    request = open_skill_request(runtime, "deploy", "notify", session_id="s-1", principal="alice")
    response = logged_in(approver).post(
        f"/approvals/requests/{request.pk}/answer/",
        {"answer": "ALLOW_SESSION", "skill": "deploy"},
        headers=HTMX,
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith(f'<article class="card request" id="request-{request.pk}"')
    assert "Answered: deploy." in html
    grant = Grant.objects.get()
    assert (grant.skill, grant.scope, grant.decision, grant.granted_by) == (
        "deploy",
        "SESSION",
        "ALLOW",
        approver,
    )
    assert AuditEvent.objects.filter(action=AuditAction.SKILL_GRANTED, actor=approver).count() == 1


def test_answer_all_answers_every_open_skill(runtime: AgentRuntime, approver: User) -> None:
    request = open_skill_request(runtime, "deploy", "notify", session_id="s-1", principal="alice")
    logged_in(approver).post(f"/approvals/requests/{request.pk}/answer/", {"answer": "DENY"}, headers=HTMX)
    request.refresh_from_db()
    assert request.status == "ANSWERED"
    assert sorted(Grant.objects.values_list("skill", "decision")) == [("deploy", "DENY"), ("notify", "DENY")]


def test_the_second_person_is_told_who_answered_and_how(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:
    # Exactly once: one answer wins, the other is told.
    request = open_skill_request(runtime, "deploy", "notify", session_id="s-1", principal="alice")
    request_answer(request=request, user=operator, answer=Answer.DENY, skills=["deploy"])
    html = (
        logged_in(approver)
        .post(
            f"/approvals/requests/{request.pk}/answer/",
            {"answer": "ALLOW_SESSION", "skill": "deploy"},
            headers=HTMX,
        )
        .content.decode()
    )
    assert "deploy was already answered by olivia: Deny." in html
    assert Grant.objects.get(skill="deploy").decision == "DENY"


def test_someone_elses_request_is_404(runtime: AgentRuntime, other_approver: User) -> None:
    request = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    client = logged_in(other_approver)
    assert client.get(f"/approvals/requests/{request.pk}/").status_code == 404
    response = client.post(f"/approvals/requests/{request.pk}/answer/", {"answer": "ALLOW_SESSION"})
    assert response.status_code == 404
    assert not Grant.objects.exists()


def test_the_poll_is_204_while_nothing_changes_and_swaps_when_something_does(
    runtime: AgentRuntime, approver: User
) -> None:
    client = logged_in(approver)
    page = client.get("/approvals/").content.decode()
    version = re.search(r"/approvals/poll/\?v=([0-9a-f]+)", page).group(1)  # type: ignore[union-attr]
    assert client.get(f"/approvals/poll/?v={version}", headers=HTMX).status_code == 204
    request = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    response = client.get(f"/approvals/poll/?v={version}", headers=HTMX)
    assert response.status_code == 200
    assert str(request.pk) in response.content.decode()
    assert "<html" not in response.content.decode()


def test_dismiss_asks_first_then_denies_for_the_session(runtime: AgentRuntime, approver: User) -> None:
    # S9: a person dismissing is an abort: SESSION DENY, never agent-wide.
    request = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    client = logged_in(approver)
    confirm = client.get(f"/approvals/requests/{request.pk}/dismiss/").content.decode()
    assert "denied for this session (never agent-wide)" in confirm
    assert not Grant.objects.exists()
    client.post(f"/approvals/requests/{request.pk}/dismiss/")
    request.refresh_from_db()
    assert request.status == "CANCELLED"
    grant = Grant.objects.get()
    assert (grant.scope, grant.decision, grant.origin) == ("SESSION", "DENY", "ABORT")


def test_session_page_shows_each_skills_decision_and_why(runtime: AgentRuntime, approver: User) -> None:
    request = open_skill_request(runtime, "deploy", "notify", session_id="s-1", principal="alice")
    request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION, skills=["deploy"])
    session = request.session
    html = logged_in(approver).get(f"/approvals/sessions/{session.pk}/").content.decode()
    assert re.search(r"<code>deploy</code></td>\s*<td>.*ALLOW.*</td>\s*<td>this session's answer", html)
    assert re.search(r"<code>notify</code></td>\s*<td>.*ASK.*</td>\s*<td>nothing decides it", html)


def test_clear_session_asks_then_removes_and_audits_with_counts(
    runtime: AgentRuntime, approver: User
) -> None:
    # S10
    request = open_skill_request(runtime, "deploy", "notify", session_id="s-1", principal="alice")
    request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION)
    client = logged_in(approver)
    url = f"/approvals/sessions/{request.session.pk}/clear/"
    assert "Removes the 2 answers this session holds" in client.get(url).content.decode()
    assert Grant.objects.active().count() == 2
    client.post(url)
    assert Grant.objects.active().count() == 0
    assert Grant.objects.count() == 2  # revoked, never deleted
    event = AuditEvent.objects.get(action=AuditAction.SESSION_CLEARED)
    assert event.details == {"removed": 2}
    assert event.actor == approver


def test_another_approvers_session_is_404(
    runtime: AgentRuntime, approver: User, other_approver: User
) -> None:
    request = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    client = logged_in(other_approver)
    assert client.get(f"/approvals/sessions/{request.session.pk}/").status_code == 404
    assert client.post(f"/approvals/sessions/{request.session.pk}/clear/").status_code == 404


def test_revoke_agent_wide_is_for_operators_and_the_owner(
    runtime: AgentRuntime, operator: User, approver: User
) -> None:
    request = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    request_answer(request=request, user=operator, answer=Answer.ALLOW_AGENT)
    assert logged_in(approver).get("/approvals/agents/agent-one/").status_code == 403
    assert logged_in(approver).post("/approvals/agents/agent-one/revoke/").status_code == 403
    client = logged_in(operator)
    page = client.get("/approvals/agents/agent-one/revoke/").content.decode()
    assert "Removes 1 agent-wide approval from the only session of agent-one" in page
    client.post("/approvals/agents/agent-one/revoke/")
    assert not Grant.objects.active().exists()
    assert AuditEvent.objects.get(action=AuditAction.AGENT_GRANTS_REVOKED).details == {"removed_agent": 1}


def test_a_single_grant_can_be_revoked(runtime: AgentRuntime, approver: User) -> None:
    request = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    request_answer(request=request, user=approver, answer=Answer.ALLOW_SESSION)
    grant = Grant.objects.get()
    client = logged_in(approver)
    client.post(f"/approvals/grants/{grant.pk}/revoke/")
    grant.refresh_from_db()
    assert grant.revoke_reason == "SINGLE"
    assert grant.revoked_by == approver


def test_operators_write_rules_and_auditors_only_read_them(
    runtime: AgentRuntime, operator: User, auditor: User, approver: User
) -> None:
    client = logged_in(operator)
    response = client.post(
        "/approvals/rules/new/",
        {"pattern": "drop-*", "runtime": "", "action": "ASK", "widest_scope": "SESSION", "note": ""},
    )
    assert response.status_code == 302
    rule = SkillRule.objects.get()
    assert (rule.pattern, rule.action, rule.widest_scope, rule.runtime) == ("drop-*", "ASK", "SESSION", None)
    assert AuditEvent.objects.filter(action=AuditAction.RULE_CREATED).count() == 1
    # Refused by the service after the form's checks, and still kept through
    # post/redirect/get with what was typed.
    assert_invalid_post_redirects_and_reloads(
        client,
        "/approvals/rules/new/",
        {"pattern": "drop-*", "action": "DENY", "widest_scope": "AGENT", "note": "typed"},
        page="/approvals/rules/skills/add/",
        shows=["already exists", 'value="drop-*"', 'value="DENY" selected', "typed</textarea>"],
    )
    assert logged_in(auditor).get("/approvals/rules/").status_code == 200
    assert "Save rule" not in logged_in(auditor).get("/approvals/rules/").content.decode()
    assert (
        logged_in(auditor).post("/approvals/rules/new/", {"pattern": "x", "action": "ALLOW"}).status_code
        == 403
    )
    assert logged_in(approver).get("/approvals/rules/").status_code == 403


def test_a_rule_capping_scope_removes_always_allow(runtime: AgentRuntime, operator: User) -> None:
    logged_in(operator).post(
        "/approvals/rules/new/", {"pattern": "drop-*", "action": "ASK", "widest_scope": "SESSION"}
    )
    request = open_skill_request(runtime, "drop-db", session_id="s-1", principal=None)
    html = logged_in(operator).get(f"/approvals/requests/{request.pk}/").content.decode()
    assert "Always allow for this agent" not in html
    assert "Allow for this session" in html


# --- S13: a request with no session ---------------------------------------------------------------


def answer_labels(html: str, request: ApprovalRequest) -> list[str]:
    return re.findall(
        rf'<button type="submit" class="btn btn-answer" id="answer-{request.pk}-[^"]*"[^>]*>([^<]+)</button>',
        html,
    )


@pytest.fixture
def owned(make_user: object) -> AgentRuntime:
    owner = make_user("owen", "approver")  # type: ignore[operator]
    return runtime_create(name="agent-owned", owner=owner, actor=TEST_ACTOR)


@pytest.mark.parametrize(
    ("who", "principal", "labels"),
    [
        ("alice", "alice", ["Deny this request"]),  # the principal, not the owner
        ("olivia", "alice", ["Allow for this session", "Always allow for this agent", "Deny"]),
        ("owen", None, ["Allow for this session", "Always allow for this agent", "Deny"]),  # the owner
        ("olivia", None, ["Allow for this session", "Always allow for this agent", "Deny"]),
        ("bob", "alice", None),  # not his: not shown
        ("owen", "alice", None),  # alice's own request: hers and the operators'
    ],
)
def test_every_role_sees_the_sessionless_answers_s13_allows(
    owned: AgentRuntime,
    approver: User,
    other_approver: User,
    operator: User,
    who: str,
    principal: str | None,
    labels: list[str] | None,
) -> None:  # S13
    request = open_skill_request(owned, "deploy", principal=principal, session_id=None)
    client = logged_in(User.objects.get(username=who))
    inbox = client.get("/approvals/").content.decode()
    page = client.get(f"/approvals/requests/{request.pk}/")
    if labels is None:
        assert str(request.pk) not in inbox
        assert page.status_code == 404
        return
    assert answer_labels(inbox, request) == labels
    assert answer_labels(page.content.decode(), request) == labels
    help_shown = escape(DENY_REQUEST_ONLY_HELP.format(runtime="agent-owned")) in inbox
    assert help_shown is (labels == ["Deny this request"])


def test_an_auditor_gets_no_sessionless_answer(owned: AgentRuntime, auditor: User) -> None:  # S13
    request = open_skill_request(owned, "deploy", principal=None, session_id=None)
    client = logged_in(auditor)
    for answer in ("DENY", "DENY_REQUEST"):
        response = client.post(
            f"/approvals/requests/{request.pk}/answer/", {"answer": answer, "skill": "deploy"}
        )
        assert response.status_code == 403
    assert not Grant.objects.exists()
    assert not ApprovalRequest.objects.get(pk=request.pk).items.get().decision


@pytest.mark.parametrize("answer", ["DENY", "ALLOW_SESSION", "ALLOW_AGENT"])
def test_a_forged_standing_answer_from_an_approver_is_refused_and_writes_nothing(
    owned: AgentRuntime, approver: User, answer: str
) -> None:  # S13: alice's forged Deny wrote an AGENT-scope DENY
    request = open_skill_request(owned, "deploy", principal="alice", session_id=None)
    client = logged_in(approver)

    response = client.post(f"/approvals/requests/{request.pk}/answer/", {"answer": answer, "skill": "deploy"})

    assert response.status_code == 403
    html = response.content.decode()
    assert "Deny this request" in html  # what to do instead
    if answer != "ALLOW_AGENT":
        message = STANDING_ANSWER_REFUSED_MESSAGE.format(
            answer=Answer(answer).label, skill="deploy", runtime="agent-owned"
        )
        assert escape(message) in html
    assert not Grant.objects.exists()
    assert not ApprovalRequest.objects.get(pk=request.pk).items.get().decision
    # By htmx: the card comes back with the refusal, nothing written either.
    response = client.post(
        f"/approvals/requests/{request.pk}/answer/", {"answer": answer, "skill": "deploy"}, headers=HTMX
    )
    assert response.status_code == 200
    assert "toast-error" in response.content.decode()
    assert not Grant.objects.exists()


def test_deny_this_request_answers_the_request_and_stores_nothing(
    owned: AgentRuntime, approver: User
) -> None:  # S13
    request = open_skill_request(owned, "deploy", principal="alice", session_id=None)

    response = logged_in(approver).post(
        f"/approvals/requests/{request.pk}/answer/",
        {"answer": "DENY_REQUEST", "skill": "deploy"},
        headers=HTMX,
    )

    assert response.status_code == 200
    html = response.content.decode()
    assert "Answered: deploy." in html
    assert 'data-decision="DENY">Deny this request<' in html
    assert not Grant.objects.exists()
    item = ApprovalRequest.objects.get(pk=request.pk).items.get()
    assert (item.decision, item.scope, item.answered_by) == ("DENY", ItemScope.REQUEST, approver)
    assert AuditEvent.objects.filter(action=AuditAction.SKILL_REQUEST_DENIED).count() == 1


def test_the_inbox_explains_deny_this_request_in_plain_words(
    runtime: AgentRuntime, approver: User
) -> None:  # S13
    html = logged_in(approver).get("/approvals/").content.decode()
    assert (
        "Deny this request</strong>: the agent is told no for that one request, and nothing is stored."
        in html
    )


# --- Two requests for the same key (S2) -----------------------------------------------------------


def test_the_second_answer_for_a_held_key_is_told_plainly_never_an_sql_message(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # S2, S7
    first = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    second = open_skill_request(runtime, "deploy", session_id="s-1", principal="alice")
    request_answer(request=first, user=approver, answer=Answer.DENY)

    response = logged_in(operator).post(
        f"/approvals/requests/{second.pk}/answer/",
        {"answer": "ALLOW_SESSION", "skill": "deploy"},
        headers=HTMX,
    )

    assert response.status_code == 200
    html = response.content.decode()
    assert escape(SETTLED_DENY_STANDS_MESSAGE.format(skill="deploy", who="alice")) in html
    assert "could not be saved" not in html
    assert "duplicate key" not in html
    assert ApprovalRequest.objects.get(pk=second.pk).status == "ANSWERED"
    assert Grant.objects.filter(revoked_at=None).count() == 1


def test_the_inbox_selector_only_reads_and_the_inbox_closes_due_requests_first(
    client: Client, approver: User, runtime: AgentRuntime
) -> None:
    # S9: a request past its deadline is not shown; closing it is a service's write (the
    # beat task's, or the inbox's before it reads), never the selector's.
    approval = open_skill_request(runtime, "deploy", session_id="s-due", principal=approver.username)
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert list(selectors.pending_requests_for(user=approver)) == []
    assert ApprovalRequest.objects.get(pk=approval.pk).status == RequestStatus.PENDING
    client.force_login(approver)
    assert client.get(reverse("approvals:inbox")).status_code == 200
    assert ApprovalRequest.objects.get(pk=approval.pk).status == RequestStatus.EXPIRED


def test_a_request_closed_by_your_answer_leaves_a_line_saying_what_became_of_it(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:
    # The card leaves the inbox with its last answer; the inbox says what was answered, for
    # JUST_ANSWERED_FOR, to whoever answered it and nobody else.
    mine = open_skill_request(runtime, "deploy", "publish", session_id="s-1", principal="alice")
    client = logged_in(approver)
    client.post(reverse("approvals:answer", args=[mine.pk]), {"answer": "ALLOW_SESSION"})
    inbox = client.get(reverse("approvals:inbox")).content.decode()
    assert f'id="request-{mine.pk}"' not in inbox  # no card: nothing is left to answer
    line = re.search(rf'<li data-request="{mine.pk}">(.*?)</li>', inbox, re.S)
    assert line is not None
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", line.group(1)))
    assert "deploy: Allow for this session; publish: Allow for this session" in text
    assert "answered by you" in text
    assert (
        f'data-request="{mine.pk}"'
        not in logged_in(operator).get(reverse("approvals:inbox")).content.decode()
    )

    ApprovalRequest.objects.filter(pk=mine.pk).update(
        answered_at=timezone.now() - policy.JUST_ANSWERED_FOR - dt.timedelta(seconds=1)
    )
    assert f'data-request="{mine.pk}"' not in client.get(reverse("approvals:inbox")).content.decode()
