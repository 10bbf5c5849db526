"""The inbox's filters (each count on the home opens the inbox showing what it counted):
?whose=mine keeps requests from the person's own sessions, ?kind=SKILL or TOOL one kind.
They narrow what S13 lets the person see, never widen it."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import RequestKind
from aimon_admin.approvals.inbox_filter import BAD_KIND_MESSAGE, BAD_WHOSE_MESSAGE, InboxFilter
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.registry.services import local_tools_replace
from aimon_admin.runtimes.models import AgentRuntime
from tests.approvals.factories import open_skill_request, open_tool_request
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db
PUSH = {"command": "git push"}


@pytest.fixture
def asked(runtime: AgentRuntime, approver: User, operator: User) -> dict[str, ApprovalRequest]:
    local_tools_replace(runtime=runtime, tools=[{"name": "Bash", "description": "shell"}], actor=TEST_ACTOR)
    return {
        "alice-skill": open_skill_request(runtime, "deploy", session_id="s-a", principal="alice"),
        "alice-tool": open_tool_request(runtime, "Bash", PUSH, session_id="s-a", principal="alice"),
        "bob-skill": open_skill_request(runtime, "deploy", session_id="s-b", principal="bob"),
        "olivia-tool": open_tool_request(runtime, "Bash", PUSH, session_id="s-o", principal="olivia"),
    }


def listed(user: User, url: str, name: str = "approvals:inbox") -> set[str]:
    client = Client()
    client.force_login(user)
    response = client.get(url.replace(reverse("approvals:inbox"), reverse(name), 1))
    assert response.status_code == 200, url
    return set(re.findall(r'id="request-([0-9a-f-]{36})"', response.content.decode()))


def keys(asked: dict[str, ApprovalRequest], *names: str) -> set[str]:
    return {str(asked[name].pk) for name in names}


@pytest.mark.parametrize("name", ["approvals:inbox", "approvals:inbox-poll"])
def test_each_filter_narrows_what_the_person_may_see(
    asked: dict[str, ApprovalRequest], approver: User, operator: User, name: str
) -> None:
    # S13: Alice sees her own; the operator every request. The filters only narrow that.
    assert listed(approver, InboxFilter().url, name) == keys(asked, "alice-skill", "alice-tool")
    assert listed(approver, InboxFilter(kind=RequestKind.TOOL).url, name) == keys(asked, "alice-tool")
    assert listed(approver, InboxFilter(kind=RequestKind.SKILL).url, name) == keys(asked, "alice-skill")
    assert listed(operator, InboxFilter().url, name) == keys(asked, *asked)
    assert listed(operator, InboxFilter(mine=True).url, name) == keys(asked, "olivia-tool")
    assert listed(operator, InboxFilter(mine=True, kind=RequestKind.SKILL).url, name) == set()
    assert listed(operator, InboxFilter(kind=RequestKind.SKILL).url, name) == keys(
        asked, "alice-skill", "bob-skill"
    )


def test_the_filtered_inbox_says_what_it_shows_and_polls_for_the_same_list(
    asked: dict[str, ApprovalRequest], approver: User
) -> None:
    client = Client()
    client.force_login(approver)
    page = client.get(InboxFilter(mine=True, kind=RequestKind.TOOL).url).content.decode()
    assert "Showing tool requests from your own sessions only." in page
    assert f"{reverse('approvals:inbox-poll')}?whose=mine&amp;kind=TOOL&amp;v=" in page
    unfiltered = client.get(InboxFilter().url).content.decode()
    assert 'data-testid="inbox-filter"' not in unfiltered
    assert f"{reverse('approvals:inbox-poll')}?v=" in unfiltered


def test_a_filter_with_nothing_in_it_says_so_and_links_every_request(
    operator: User, runtime: AgentRuntime
) -> None:
    client = Client()
    client.force_login(operator)
    page = client.get(InboxFilter(kind=RequestKind.TOOL).url).content.decode()
    assert "No tool requests are waiting." in page
    assert f'<a href="{reverse("approvals:inbox")}">Show every request</a>' in page


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"kind": "SKILLS"}, BAD_KIND_MESSAGE.format(value="SKILLS")),
        ({"kind": "tool"}, BAD_KIND_MESSAGE.format(value="tool")),
        ({"whose": "me"}, BAD_WHOSE_MESSAGE.format(value="me")),
    ],
)
@pytest.mark.parametrize("name", ["approvals:inbox", "approvals:inbox-poll"])
def test_a_filter_that_cannot_be_read_is_a_400_naming_it(
    approver: User, query: dict[str, str], message: str, name: str
) -> None:
    client = Client()
    client.force_login(approver)
    response = client.get(reverse(name), query)
    assert response.status_code == 400
    assert escape(message) in response.content.decode()


def test_the_filter_builds_the_addresses_the_home_links_to() -> None:
    assert InboxFilter().url == reverse("approvals:inbox")
    assert (
        InboxFilter(mine=True, kind=RequestKind.SKILL).url
        == f"{reverse('approvals:inbox')}?whose=mine&kind=SKILL"
    )
    assert InboxFilter(kind=RequestKind.TOOL).description == "tool requests"
    assert InboxFilter(mine=True).description == "requests from your own sessions"
