"""Who may read the auditor's pages: auditors and operators read everything, nobody
changes anything through them (GET only), approvers are refused, strangers sign in."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime
from tests.audit_pages.pages_support import logged_in

pytestmark = pytest.mark.django_db

PAGES = [
    ("audit:home", []),
    ("audit:log", []),
    ("audit:event", [1]),
    ("audit:escalations", []),
    ("audit:in-force", []),
    ("audit:export-csv", []),
    ("audit:export-jsonl", []),
]
IDS = [name for name, _ in PAGES]


@pytest.fixture
def logged(runtime: AgentRuntime) -> None:
    """A log with at least event #1 (creating the runtime wrote it)."""
    assert AuditEvent.objects.filter(seq=1).exists()


@pytest.mark.parametrize(("name", "args"), PAGES, ids=IDS)
def test_anonymous_visitors_are_sent_to_sign_in(logged: None, name: str, args: list[int]) -> None:
    url = reverse(name, args=args)
    response = Client().get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("accounts:login"))


@pytest.mark.parametrize(("name", "args"), PAGES, ids=IDS)
def test_approvers_without_the_audit_permission_are_refused(
    logged: None, approver: User, name: str, args: list[int]
) -> None:
    # A1: auditors (and operators) read the log; an approver is not an auditor.
    response = logged_in(approver).get(reverse(name, args=args))
    assert response.status_code == 403


@pytest.mark.parametrize(("name", "args"), PAGES, ids=IDS)
@pytest.mark.parametrize("role", ["auditor", "operator"])
def test_auditors_and_operators_read_every_page(
    logged: None, request: pytest.FixtureRequest, role: str, name: str, args: list[int]
) -> None:
    person: User = request.getfixturevalue(role)
    response = logged_in(person).get(reverse(name, args=args))
    assert response.status_code == 200


@pytest.mark.parametrize(("name", "args"), PAGES, ids=IDS)
@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_nothing_on_the_audit_pages_changes_anything(
    logged: None, auditor: User, name: str, args: list[int], method: str
) -> None:
    # A2: the log is append-only; its pages only read.
    client = logged_in(auditor)  # signing in is itself an event: count from here
    before = list(AuditEvent.objects.order_by("seq").values_list("seq", "hash"))
    response = getattr(client, method)(reverse(name, args=args))
    assert response.status_code == 405
    assert list(AuditEvent.objects.order_by("seq").values_list("seq", "hash")) == before


def test_the_audit_log_is_in_the_navigation_of_those_who_may_read_it(
    auditor: User, operator: User, approver: User
) -> None:
    home = reverse("audit:home")
    for person, shown in ((auditor, True), (operator, True), (approver, False)):
        page = logged_in(person).get(reverse("core:home")).content.decode()
        assert (f'href="{home}"' in page) is shown, person.username
