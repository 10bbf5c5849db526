"""Helpers for the auditor's page tests: people's clients and escalations made through
the real approval services (S6)."""

from __future__ import annotations

from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import Answer
from aimon_admin.approvals.models import ApprovalRequest, Grant
from aimon_admin.approvals.services import RequestInput, request_answer, request_create
from aimon_admin.runtimes.models import AgentRuntime

HTMX = {"HX-Request": "true"}


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def ask(runtime: AgentRuntime, *skills: str, **fields: object) -> ApprovalRequest:
    return request_create(RequestInput(runtime=runtime, skills=list(skills), **fields))[0]  # type: ignore[arg-type]


def escalate(runtime: AgentRuntime, person: User, skill: str = "deploy", reason: str = "Ship it") -> Grant:
    """A request with no session, answered "Allow for this session" by `person` (who
    must be allowed agent scope: an operator or the runtime's owner), so it escalates."""
    request = ask(runtime, skill, principal=person.username, reason=reason)
    outcome = request_answer(request=request, user=person, answer=Answer.ALLOW_SESSION)
    assert [item.skill for item in outcome.written] == [skill], outcome
    return Grant.objects.get(request=request, skill=skill)
