"""What the browser's answer click costs the database (issue 14, the house), pinned on SQLite
and on PostgreSQL: every check of S4, S5, S7 and S13 stays, each in as few round trips as
it honestly takes."""

from __future__ import annotations

from typing import Any

import pytest

from aimon_admin.accounts.models import User
from aimon_admin.approvals import selectors
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.runtimes.models import AgentRuntime

pytestmark = pytest.mark.django_db


def _open(runtime: AgentRuntime, approver: User) -> ApprovalRequest:
    data = RequestInput(runtime=runtime, skills=["deploy"], session_id="s-1", principal=approver.username)
    return request_create(data)[0]


def test_the_request_read_with_its_items_is_the_visible_one_in_one_query(
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
        with django_assert_num_queries(1):
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
