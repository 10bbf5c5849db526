"""What the browser's answer click costs the database, pinned on SQLite and on PostgreSQL:
every check of S4, S5, S7 and S13 stays, each in as few round trips as it honestly takes."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.approvals import selectors
from aimon_admin.approvals.choices import Answer, RequestStatus
from aimon_admin.approvals.models import ApprovalRequest, Grant
from aimon_admin.approvals.services import RequestInput, request_answer, request_create
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime

pytestmark = pytest.mark.django_db

# The click on "Allow for this session" for a one-skill request, as htmx posts it from the
# inbox, signed in as its approver. Inside a test's transaction, in order:
#  1 the session (SessionMiddleware)
#  2 the person (AuthenticationMiddleware), then, as the view asks (S13: who may answer),
#  3 their own permissions  4 their groups' permissions (Django's ModelBackend)  5 their roles
#  6 the request, through the visibility rule (S13)   7 its items (prefetch_related)
#  8 the request read again by the answer itself, as it stands now (S7, S9: its status
#    decides), with its runtime and sessions   9 its items (prefetch_related)
# 10 SAVEPOINT: the skill's own transaction (S8: one skill's failure leaves the others)
# 11 the grant inserted unless its key is held (ON CONFLICT DO NOTHING: no savepoint)
# 12 the item claimed and pointed at its grant: one conditional UPDATE, while the request
#    is pending (exactly once; the loser of a race rolls its grant back)
# 13 the audit chain's head (A2; on PostgreSQL taken under the chain's lock in the same
#    round trip)   14 the event (A2, A3: in the same transaction)
# 14b the event's leaf added to the audit log's Merkle tree (A4), in the same transaction: on
#    PostgreSQL one call of a function that hashes and stores in the server; on SQLite the
#    right edge's nodes read at once, then the new nodes inserted (one executemany)
# 15 the request closed: conditional UPDATE once no skill is open (S7)
# 16 RELEASE SAVEPOINT
# The session's activity (S12: an answer counts as activity) is written as first sight
# writes it, once a minute at most: this session was seen when it asked, so not here (the
# tests of S12 in test_services.py answer sessions seen longer ago). Outside a test's
# transaction the same count: BEGIN and COMMIT in place of 10 and 16. The card is answered
# from what the click knows (it closed the request with every answer in hand), not read
# again. What runs once the answer commits (the wake-up published to Redis, S7, and any
# listener's task) is outside this count: a test's transaction never commits.
# Each of these is a check the click must make or a row it must write. Two are plain rather
# than fewest: the view's read (S13) and the answer's own are separate reads, and the
# permissions are Django's own reads (docs/performance.md: saving them buys under 10% of the
# click's server time).
ANSWER_CLICK_QUERIES = {"sqlite": 18, "postgresql": 17}


def _open(runtime: AgentRuntime, approver: User) -> ApprovalRequest:
    data = RequestInput(runtime=runtime, skills=["deploy"], session_id="s-1", principal=approver.username)
    return request_create(data)[0]


def _click(client: Client, approval: ApprovalRequest) -> Any:
    url = reverse("approvals:answer", args=[approval.pk])
    return client.post(url, {"answer": Answer.ALLOW_SESSION, "skill": "deploy"}, HTTP_HX_REQUEST="true")


def _check_answered(response: Any, approval: ApprovalRequest) -> None:
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-decision="ALLOW"' in html
    assert "by alice" in html
    assert "Answered" in html
    assert 'hx-post="' not in html
    stored = ApprovalRequest.objects.get(pk=approval.pk)
    assert (stored.status, stored.answered_by.username) == (RequestStatus.ANSWERED, "alice")
    assert Grant.objects.get(request=approval).scope == "SESSION"
    assert AuditEvent.objects.filter(action=AuditAction.SKILL_GRANTED, subject="deploy").count() == 1


def test_the_allow_for_this_session_click_runs_a_pinned_number_of_queries(
    client: Client, approver: User, runtime: AgentRuntime, django_assert_max_num_queries: Any
) -> None:  # S4, S5, S7, S13
    approval = _open(runtime, approver)
    client.force_login(approver)
    with django_assert_max_num_queries(ANSWER_CLICK_QUERIES[connection.vendor]) as queries:
        response = _click(client, approval)
    _check_answered(response, approval)
    sqls = [q["sql"] or "" for q in queries.captured_queries]
    requests, grants = ApprovalRequest._meta.db_table, Grant._meta.db_table
    # The request row read twice (the view's visibility read, the answer's own), closed once.
    assert len([sql for sql in sqls if sql.startswith("SELECT") and f'"{requests}"' in sql]) == 2, sqls
    assert len([sql for sql in sqls if sql.startswith(f'UPDATE "{requests}"')]) == 1, sqls
    # The grant's key is not read before the insert that finds it free.
    assert not [sql for sql in sqls if sql.startswith("SELECT") and f'FROM "{grants}"' in sql], sqls


def test_an_answer_that_closes_its_request_knows_it_as_stored(
    runtime: AgentRuntime, approver: User
) -> None:  # S7: what the card shows is what the database holds
    approval = selectors.request_visible_to(user=approver, pk=_open(runtime, approver).pk)
    assert approval is not None
    outcome = request_answer(request=approval, user=approver, answer=Answer.ALLOW_SESSION)
    shown = outcome.request
    assert shown is not None
    assert shown.pk == approval.pk
    stored = ApprovalRequest.objects.get(pk=approval.pk)
    fields = ("status", "answered_at", "closed_at", "answered_by_id")
    assert [getattr(shown, name) for name in fields] == [getattr(stored, name) for name in fields]
    [item] = shown.items.all()
    assert (item.decision, item.answered_by_id) == ("ALLOW", approver.pk)


def test_an_answer_after_someone_elses_is_shown_from_a_fresh_read(
    runtime: AgentRuntime, approver: User, operator: User
) -> None:  # S7: an item answered by someone else since the answer's read is not in hand
    data = RequestInput(runtime=runtime, skills=["deploy", "notify"], session_id="s-1", principal="alice")
    opened = request_create(data)[0]
    theirs: list[Any] = []

    def operator_answers_meanwhile(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        # The operator's answer lands after the approver's answer read the request, just
        # before its first write (its grant), as another person's click at that moment would.
        if not theirs and sql.startswith(f'INSERT INTO "{Grant._meta.db_table}"'):
            theirs.append(None)  # once: the operator's own grant insert passes through
            theirs[0] = request_answer(request=opened, user=operator, answer=Answer.DENY, skills=["notify"])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(operator_answers_meanwhile):
        outcome = request_answer(
            request=opened, user=approver, answer=Answer.ALLOW_SESSION, skills=["deploy"]
        )
    assert not theirs[0].request_answered
    assert theirs[0].request is None
    assert outcome.request_answered  # this call closed it ...
    assert outcome.request is None  # ... but its notify is the operator's, not in hand here
    stored = ApprovalRequest.objects.get(pk=opened.pk)
    assert stored.status == RequestStatus.ANSWERED
    assert {i.skill: i.decision for i in stored.items.all()} == {"deploy": "ALLOW", "notify": "DENY"}


def test_the_request_read_with_its_items_is_the_visible_one_in_two_queries(
    runtime: AgentRuntime,
    approver: User,
    other_approver: User,
    operator: User,
    django_assert_num_queries: Any,
) -> None:  # S13: one rule decides visibility; someone else's request is not found
    data = RequestInput(runtime=runtime, skills=["deploy", "notify"], session_id="s-1", principal="alice")
    opened = request_create(data)[0]
    for user in (approver, operator):
        user = User.objects.get(pk=user.pk)
        user.roles  # noqa: B018 - the roles read first: the count below is the request's alone
        with django_assert_num_queries(2):  # the request with its relations, then its items
            found = selectors.request_visible_to(user=user, pk=opened.pk)
            assert found is not None
            assert [item.skill for item in found.items.all()] == ["deploy", "notify"]
            assert {item.request for item in found.items.all()} == {found}
            assert (found.runtime.name, found.session.session_id, found.invoking_session) == (
                "agent-one",
                "s-1",
                None,
            )
    assert selectors.request_visible_to(user=other_approver, pk=opened.pk) is None
    assert selectors.request_visible_to(user=approver, pk="00000000-0000-0000-0000-000000000000") is None


def test_the_visible_request_is_listed_by_the_same_rule(runtime: AgentRuntime, approver: User) -> None:
    # S13: the one-query read and the list agree on the request's relations and items.
    opened = _open(runtime, approver)
    listed = selectors.request_list_visible_to(user=approver).get(pk=opened.pk)
    found = selectors.request_visible_to(user=approver, pk=opened.pk)
    assert found is not None
    assert (found.pk, found.runtime_id, found.session_id) == (listed.pk, listed.runtime_id, listed.session_id)
    assert [i.pk for i in found.items.all()] == [i.pk for i in listed.items.all()]
