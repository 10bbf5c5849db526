"""Escalated grants front and centre (S6), the auditor's home, and what was in force at
a moment (S10, S12: grants are revoked, never deleted, so history answers)."""

from __future__ import annotations

import datetime as dt
import html
import re
from collections.abc import Callable

import pytest
from django.urls import reverse
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import Grant
from aimon_admin.approvals.services import agent_grants_revoke, request_answer, session_clear
from aimon_admin.audit import filters
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit_pages import selectors
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime
from tests.audit_pages.pages_support import ask, escalate, logged_in

pytestmark = pytest.mark.django_db
IN_FORCE = '<span class="badge badge-warn">In force</span>'


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.fixture
def owner(make_user: Callable[..., User], runtime: AgentRuntime) -> User:
    """An approver who owns `runtime`, so may answer agent-wide (S13) and can escalate."""
    person = make_user("owen", "approver")
    runtime.owner = person
    runtime.save(update_fields=["owner"])
    return person


def test_each_escalated_grant_states_its_reach_who_when_and_from_which_request(
    auditor: User, owner: User, runtime: AgentRuntime
) -> None:
    # S6: reach in words, who answered, the request, still in force, the event.
    grant = escalate(runtime, owner, "deploy", reason="Nightly deploy")
    event = AuditEvent.objects.get(action=AuditAction.SKILL_GRANT_ESCALATED)
    page = logged_in(auditor).get(reverse("audit:escalations")).content.decode()
    plain = text(page)
    assert (
        "Reach: All sessions of runtime agent-one, no expiry, survives Clear, "
        "holds until it is revoked, on its own or with Revoke agent-wide." in plain
    )
    assert "Granted by owen" in plain
    assert str(grant.request_id) in page
    assert "Nightly deploy" in plain
    assert IN_FORCE in page
    assert f'href="{reverse("audit:event", args=[event.seq])}"' in page


def test_a_revoked_escalation_says_when_and_by_whom_and_clear_does_not_touch_it(
    auditor: User, owner: User, operator: User, runtime: AgentRuntime
) -> None:
    # S10: Clear leaves agent-wide grants; only Revoke agent-wide removes them.
    escalate(runtime, owner, "deploy")
    session_clear(runtime=runtime, session_id="any-session", actor=Actor.for_user(operator))
    client = logged_in(auditor)
    assert IN_FORCE in client.get(reverse("audit:escalations")).content.decode()
    agent_grants_revoke(runtime=runtime, actor=Actor.for_user(operator))
    page = client.get(reverse("audit:escalations")).content.decode()
    assert IN_FORCE not in page
    plain = text(page)
    assert re.search(r"Agent-wide approvals revoked .* ago by olivia", plain)


def test_only_escalations_are_listed_not_ordinary_agent_grants(
    auditor: User, owner: User, runtime: AgentRuntime
) -> None:
    always = ask(runtime, "notify", session_id="s-1", principal="owen")
    request_answer(request=always, user=owner, answer=Answer.ALLOW_AGENT)  # agent-wide, not escalated
    escalate(runtime, owner, "deploy")
    page = text(logged_in(auditor).get(reverse("audit:escalations")).content.decode())
    assert "deploy" in page
    assert "notify" not in page


def test_escalations_page_by_keyset_and_filter_by_runtime(
    auditor: User,
    owner: User,
    runtime: AgentRuntime,
    other_runtime: AgentRuntime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(selectors, "ESCALATION_PAGE_SIZE", 2)
    for skill in ("a", "b", "c"):
        escalate(runtime, owner, skill)
    client = logged_in(auditor)
    first = client.get(reverse("audit:escalations")).content.decode()
    seqs = [int(s) for s in re.findall(r'data-seq="(\d+)"', first)]
    assert len(seqs) == 2
    assert seqs == sorted(seqs, reverse=True)
    older = re.search(r'rel="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    assert older == f"/audit/escalations/?before={seqs[-1]}"
    second = client.get(older).content.decode()
    assert len(re.findall(r'data-seq="(\d+)"', second)) == 1
    assert 'rel="next"' not in second
    assert (
        "No session answer has been escalated"
        in client.get(reverse("audit:escalations"), {"runtime": other_runtime.name}).content.decode()
    )
    assert client.get(reverse("audit:escalations"), {"runtime": "nope"}).status_code == 400
    assert client.get(reverse("audit:escalations"), {"page": "2"}).status_code == 400


def test_home_counts_escalations_in_force_bounded_and_says_never_verified(
    auditor: User, owner: User, runtime: AgentRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = logged_in(auditor)
    page = client.get(reverse("audit:home")).content.decode()
    assert 'data-testid="escalations-in-force">0<' in page
    assert "Never verified" in page
    for skill in ("a", "b", "c"):
        escalate(runtime, owner, skill)
    page = client.get(reverse("audit:home")).content.decode()
    assert 'data-testid="escalations-in-force">3<' in page
    assert "Latest escalations" in page
    assert "<strong>c</strong> on agent-one by owen" in page
    monkeypatch.setattr(selectors, "IN_FORCE_COUNT_LIMIT", 2)
    page = client.get(reverse("audit:home")).content.decode()
    assert 'data-testid="escalations-in-force">2+<' in page


# --- In force at a moment -------------------------------------------------------------------


def _skills(response) -> list[str]:  # type: ignore[no-untyped-def]
    page = response.content.decode()
    if "<tbody>" not in page:
        return []
    body = page[page.index("<tbody>") : page.index("</tbody>")]
    return re.findall(r"<td><a href=\"[^\"]+\">([^<]+)</a></td>", body)


def test_in_force_at_a_moment_answers_from_history(
    auditor: User, owner: User, operator: User, runtime: AgentRuntime, approver: User
) -> None:
    # S10, S12: a session's grants plus the runtime's agent-wide ones, as they were then.
    session_request = ask(runtime, "read-mail", session_id="s-1", principal="owen")
    request_answer(request=session_request, user=owner, answer=Answer.ALLOW_SESSION)
    escalate(runtime, owner, "deploy")
    between = timezone.now()
    agent_grants_revoke(runtime=runtime, actor=Actor.for_user(operator))
    client = logged_in(auditor)
    url = reverse("audit:in-force")
    at = between.isoformat()
    assert _skills(client.get(url, {"runtime": runtime.name, "session": "s-1", "at": at})) == [
        "deploy",
        "read-mail",
    ]
    assert _skills(client.get(url, {"runtime": runtime.name, "at": at})) == ["deploy"]
    assert _skills(client.get(url, {"runtime": runtime.name, "session": "s-1"})) == ["read-mail"]
    assert _skills(client.get(url, {"runtime": runtime.name})) == []
    before_all = (
        Grant.objects.order_by("created_at").first().created_at - dt.timedelta(seconds=1)
    ).isoformat()
    assert _skills(client.get(url, {"runtime": runtime.name, "session": "s-1", "at": before_all})) == []
    page = text(client.get(url, {"runtime": runtime.name, "session": "s-1", "at": at}).content.decode())
    assert "owen" in page
    assert "escalated" in page


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"runtime": "nope"}, "runtime", "Runtime: No runtime is named 'nope'."),
        (
            {"runtime": "agent-one", "session": "never-seen"},
            "session",
            "Session: Runtime 'agent-one' has no session 'never-seen'.",
        ),
        ({"session": "s-1"}, "runtime", "Runtime: Name the runtime too: sessions are named per runtime."),
        (
            {"runtime": "agent-one", "at": "noon"},
            "at",
            "At: " + filters.BAD_TIME_MESSAGE.format(value="noon"),
        ),
        ({"runtime": "agent-one", "when": "now"}, "when", "This page has no field named 'when'."),
    ],
)
def test_in_force_says_what_it_cannot_read_on_its_page_the_form_kept(
    auditor: User, runtime: AgentRuntime, query: dict[str, str], field: str, message: str
) -> None:
    # A sentence naming the field, on the page with its form as typed.
    response = logged_in(auditor).get(reverse("audit:in-force"), query)
    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    assert f'data-field="{field}"' in page
    assert message in page
    assert '<form method="get" action="/audit/in-force/"' in page
    for name, value in query.items():
        if name in ("runtime", "session", "at"):
            assert f'name="{name}" type="text" value="{value}"' in page
    if field in ("session", "at"):
        assert f'id="f-{field}" name="{field}" type="text" value="{query[field]}" aria-invalid="true"' in page


def test_in_force_at_is_a_utc_date_time_picker(auditor: User, runtime: AgentRuntime) -> None:
    # "At" is a native date-time picker, in UTC; a moment given with its offset (as the event
    # page's links give it) shows as the same moment in UTC.
    client = logged_in(auditor)
    page = client.get(reverse("audit:in-force"), {"runtime": runtime.name}).content.decode()
    assert 'name="at" type="datetime-local" value="">' in page
    assert "(UTC; leave it empty for now)" in page
    page = client.get(
        reverse("audit:in-force"), {"runtime": runtime.name, "at": "2025-01-31T14:05:07.123456+02:00"}
    ).content.decode()
    assert 'name="at" type="datetime-local" value="2025-01-31T12:05:07.123" step="0.001"' in page
