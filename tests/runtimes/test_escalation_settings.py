"""A runtime's escalation time (P2): set by operators on its page (post/redirect/get), from
the command line, bounded, and audited with its other settings."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_create, runtime_update_settings
from tests.accounts.factories import logged_in
from tests.conftest import TEST_ACTOR
from tests.core.prg_support import assert_invalid_post_redirects_and_reloads

pytestmark = pytest.mark.django_db

SETTINGS = {"ceiling": "MUTATING", "exempt_at_or_below": "READ_ONLY", "owner": "", "description": ""}


def changes() -> list[dict]:
    return [
        event.details
        for event in AuditEvent.objects.filter(action=AuditAction.RUNTIME_SETTINGS_CHANGED).order_by("seq")
    ]


def test_an_operator_sets_and_clears_the_time_on_the_runtime_page(
    runtime: AgentRuntime, operator: User
) -> None:
    client = logged_in(operator)
    response = client.post(
        "/runtimes/agent-one/settings/", {**SETTINGS, "escalate_after_minutes": "10"}, follow=True
    )
    assert response.redirect_chain == [("/runtimes/agent-one/", 302)]
    assert "Settings saved." in response.content.decode()
    runtime.refresh_from_db()
    assert runtime.escalate_after_seconds == 600
    # Shown again as typed, in minutes.
    assert 'name="escalate_after_minutes" value="10"' in client.get("/runtimes/agent-one/").content.decode()
    client.post("/runtimes/agent-one/settings/", {**SETTINGS, "escalate_after_minutes": ""})
    runtime.refresh_from_db()
    assert runtime.escalate_after_seconds is None
    assert changes() == [
        {
            "changed": ["escalate_after_seconds"],
            "before": {"escalate_after_seconds": None},
            "after": {"escalate_after_seconds": 600},
        },
        {
            "changed": ["escalate_after_seconds"],
            "before": {"escalate_after_seconds": 600},
            "after": {"escalate_after_seconds": None},
        },
    ]
    assert AuditEvent.objects.filter(action=AuditAction.RUNTIME_SETTINGS_CHANGED).first().channel == "BROWSER"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("0", "Ensure this value is greater than or equal to 1."),
        ("1441", "Ensure this value is less than or equal to 1440."),
        ("ten", "Enter a whole number."),
        ("-5", "Ensure this value is greater than or equal to 1."),
    ],
)
def test_a_time_out_of_bounds_is_refused_naming_the_field_and_a_reload_keeps_it(
    runtime: AgentRuntime, operator: User, given: str, message: str
) -> None:
    assert_invalid_post_redirects_and_reloads(
        logged_in(operator),
        "/runtimes/agent-one/settings/",
        {**SETTINGS, "escalate_after_minutes": given, "description": "kept"},
        page="/runtimes/agent-one/",
        shows=["kept</textarea>", message],
    )
    runtime.refresh_from_db()
    assert (runtime.escalate_after_seconds, runtime.description) == (None, "")
    assert changes() == []


def test_a_time_in_seconds_shown_as_minutes_is_kept_when_sent_back_unchanged(
    runtime: AgentRuntime, operator: User
) -> None:
    # 90 seconds (set from code) shows as 1 minute; saving the form as shown changes nothing.
    AgentRuntime.objects.filter(pk=runtime.pk).update(escalate_after_seconds=90)
    response = logged_in(operator).post(
        "/runtimes/agent-one/settings/", {**SETTINGS, "escalate_after_minutes": "1"}, follow=True
    )
    assert "Nothing changed." in response.content.decode()
    runtime.refresh_from_db()
    assert runtime.escalate_after_seconds == 90


def test_an_auditor_sees_the_time_in_words(runtime: AgentRuntime, auditor: User) -> None:
    AgentRuntime.objects.filter(pk=runtime.pk).update(escalate_after_seconds=5400)
    page = logged_in(auditor).get("/runtimes/agent-one/").content.decode()
    assert "Send to operators after</dt><dd>1 hour 30 minutes</dd>" in page


def test_a_new_runtime_may_be_given_a_time(operator: User) -> None:
    response = logged_in(operator).post(
        "/runtimes/new/", {**SETTINGS, "name": "nightly", "escalate_after_minutes": "15"}
    )
    assert response.status_code == 302
    assert AgentRuntime.objects.get(name="nightly").escalate_after_seconds == 900
    (event,) = AuditEvent.objects.filter(action=AuditAction.RUNTIME_CREATED)
    assert event.details["escalate_after_seconds"] == 900


@pytest.mark.parametrize("seconds", [0, 59, 86401])
def test_the_service_refuses_a_time_out_of_bounds(runtime: AgentRuntime, seconds: int) -> None:
    with pytest.raises(ValidationError, match="60 seconds at the earliest"):
        runtime_update_settings(
            runtime=runtime,
            ceiling=runtime.ceiling,
            exempt_at_or_below=runtime.exempt_at_or_below,
            owner=None,
            description="",
            escalate_after_seconds=seconds,
            actor=TEST_ACTOR,
        )
    with pytest.raises(ValidationError, match="60 seconds at the earliest"):
        runtime_create(name="other", escalate_after_seconds=seconds, actor=TEST_ACTOR)
    runtime.refresh_from_db()
    assert runtime.escalate_after_seconds is None


def test_settings_saved_without_the_time_keep_it(runtime: AgentRuntime) -> None:
    # A caller that does not name it (`...`) leaves it as it is.
    AgentRuntime.objects.filter(pk=runtime.pk).update(escalate_after_seconds=600)
    runtime_update_settings(
        runtime=runtime,
        ceiling="READ_ONLY",
        exempt_at_or_below="READ_ONLY",
        owner=None,
        description="",
        actor=TEST_ACTOR,
    )
    runtime.refresh_from_db()
    assert (runtime.ceiling, runtime.escalate_after_seconds) == ("READ_ONLY", 600)


def test_create_runtime_takes_the_time_in_minutes() -> None:
    out, err = StringIO(), StringIO()
    call_command("create_runtime", "nightly", "--escalate-after-minutes", "10", stdout=out, stderr=err)
    assert AgentRuntime.objects.get(name="nightly").escalate_after_seconds == 600
    with pytest.raises(CommandError, match="60 seconds at the earliest"):
        call_command("create_runtime", "weekly", "--escalate-after-minutes", "0", stdout=out, stderr=err)
    assert not AgentRuntime.objects.filter(name="weekly").exists()
