"""Which enforcement point (G1-G3) last called as a runtime: told by the User-Agent's first
product token, noted by every authenticated API call, at most once a minute per runtime and
point, and only a bounded, plain label kept of what the caller sent."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from django.core.exceptions import ValidationError
from django.db import DataError, IntegrityError, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from aimon_admin.accounts.models import User
from aimon_admin.runtimes import enforcement
from aimon_admin.runtimes.choices import EnforcementPoint
from aimon_admin.runtimes.models import AgentRuntime, EnforcementPointCall

GATEWAY_UA = "aimon-gateway/0.1.0"
HOOK_UA = "aimon-claude-hook/0.1.0"
CLIENT_UA = "aimon-client/0.1.0 python-httpx/0.28.1"
TABLE = EnforcementPointCall._meta.db_table


@pytest.fixture(autouse=True)
def fresh_process() -> Iterator[None]:
    # What an earlier test's calls wrote is this process's memory, not this test's.
    enforcement.forget()
    yield
    enforcement.forget()


# --- The User-Agent read (no database) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("user_agent", "point", "product"),
    [
        # G1-G3: each point names itself in the first product token.
        ("aimon-gateway/0.1.0", EnforcementPoint.GATEWAY, "aimon-gateway/0.1.0"),
        ("aimon-claude-hook/0.1.0", EnforcementPoint.CLAUDE_HOOK, "aimon-claude-hook/0.1.0"),
        ("aimon-client/0.1.0 python-httpx/0.28.1", EnforcementPoint.CLIENT, "aimon-client/0.1.0"),
        ("aimon-client", EnforcementPoint.CLIENT, "aimon-client"),
        ("Aimon-Gateway/2.0", EnforcementPoint.GATEWAY, "Aimon-Gateway/2.0"),
        ("  aimon-gateway/0.1.0\t(linux)", EnforcementPoint.GATEWAY, "aimon-gateway/0.1.0"),
        # Only the first token counts: a browser naming the gateway later is another caller.
        ("Mozilla/5.0 aimon-gateway/0.1.0", EnforcementPoint.OTHER, "Mozilla/5.0"),
        ("curl/8.5.0", EnforcementPoint.OTHER, "curl/8.5.0"),
        ("aimon-gateway-fork/1.0", EnforcementPoint.OTHER, "aimon-gateway-fork/1.0"),
        ("", EnforcementPoint.OTHER, ""),
        ("   ", EnforcementPoint.OTHER, ""),
        # Odd text is kept as no label at all, or without the odd version.
        ("<script>alert(1)</script>", EnforcementPoint.OTHER, ""),
        ('x"><img src=x>/1', EnforcementPoint.OTHER, ""),
        ("aimon-gateway/<b>1</b>", EnforcementPoint.GATEWAY, "aimon-gateway"),
        ("aimon-gateway/0.1.0\x00", EnforcementPoint.GATEWAY, "aimon-gateway"),
        ("a\u0456mon-gateway/0.1.0", EnforcementPoint.OTHER, ""),  # a Cyrillic i
        ("aimon-gateway/" + "9" * 5000, EnforcementPoint.GATEWAY, "aimon-gateway"),
        ("x" * 10_000, EnforcementPoint.OTHER, ""),
        (
            "aimon-claude-hook/" + "1." * 19 + "1",
            EnforcementPoint.CLAUDE_HOOK,
            "aimon-claude-hook/" + "1." * 19 + "1",
        ),
    ],
)
def test_the_first_product_token_names_the_point_and_only_a_plain_label_is_kept(
    user_agent: str, point: EnforcementPoint, product: str
) -> None:
    assert enforcement.caller_of(user_agent) == (point, product)


def test_a_kept_label_is_never_longer_than_the_column() -> None:
    longest = "n" * 60 + "/" + "v" * 39
    assert enforcement.caller_of(longest)[1] == longest
    assert len(longest) <= EnforcementPointCall._meta.get_field("product").max_length


# --- The table's constraints -----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_point_outside_the_enum_is_refused_by_full_clean_and_by_the_database(runtime: AgentRuntime) -> None:
    row = EnforcementPointCall(runtime=runtime, point="BROWSER", last_called_at=timezone.now())
    with pytest.raises(ValidationError, match="not a valid choice"):
        row.full_clean()
    with pytest.raises(IntegrityError), transaction.atomic():
        EnforcementPointCall.objects.bulk_create([row])


@pytest.mark.django_db
def test_one_row_per_runtime_and_point_and_a_bounded_label(runtime: AgentRuntime) -> None:
    now = timezone.now()
    EnforcementPointCall.objects.create(runtime=runtime, point=EnforcementPoint.GATEWAY, last_called_at=now)
    with pytest.raises(IntegrityError), transaction.atomic():
        EnforcementPointCall.objects.create(
            runtime=runtime, point=EnforcementPoint.GATEWAY, last_called_at=now
        )
    long_label = EnforcementPointCall(
        runtime=runtime, point=EnforcementPoint.OTHER, product="p" * 101, last_called_at=now
    )
    with pytest.raises(ValidationError):
        long_label.full_clean()
    # SQLite: the named CHECK; PostgreSQL: the column's own length, before the CHECK.
    with pytest.raises((IntegrityError, DataError)), transaction.atomic():
        EnforcementPointCall.objects.bulk_create([long_label])


# --- Recorded by real API calls --------------------------------------------------------------------


def _row(runtime: AgentRuntime, point: EnforcementPoint) -> EnforcementPointCall:
    return EnforcementPointCall.objects.get(runtime=runtime, point=point)


def _tool_decision(api: APIClient, user_agent: str) -> None:
    response = api.post(
        "/api/v1/tool-decisions",
        {"tool": "Bash", "arguments": {"command": "ls"}, "session_id": "s1"},
        format="json",
        HTTP_USER_AGENT=user_agent,
    )
    assert response.status_code == 200, response.content


@pytest.mark.django_db
def test_a_gateway_tool_decision_is_recorded_for_its_runtime_only(
    api: APIClient, runtime: AgentRuntime, other_runtime: AgentRuntime
) -> None:
    # G2 through the fused tool decision (the hot path).
    before = timezone.now()
    _tool_decision(api, GATEWAY_UA)
    row = _row(runtime, EnforcementPoint.GATEWAY)
    assert row.product == GATEWAY_UA
    assert before <= row.last_called_at <= timezone.now()
    assert list(EnforcementPointCall.objects.values_list("runtime__name", "point")) == [
        ("agent-one", "GATEWAY")
    ]


@pytest.mark.django_db
def test_a_hook_skill_decision_and_a_client_listing_are_recorded(
    api: APIClient, runtime: AgentRuntime
) -> None:
    # G3 through the fused skill decision; G1 through a view DRF authenticates.
    response = api.post(
        "/api/v1/skill-decisions",
        {"skills": ["deploy"], "session_id": "s1"},
        format="json",
        HTTP_USER_AGENT=HOOK_UA,
    )
    assert response.status_code == 200, response.content
    assert api.get("/api/v1/tools", HTTP_USER_AGENT=CLIENT_UA).status_code == 200
    assert {(row.point, row.product) for row in runtime.point_calls.all()} == {
        ("CLAUDE_HOOK", HOOK_UA),
        ("CLIENT", "aimon-client/0.1.0"),
    }


@pytest.mark.django_db
def test_the_long_poll_is_a_call_too(api: APIClient, runtime: AgentRuntime) -> None:
    opened = api.post(
        "/api/v1/approval-requests",
        {"skills": ["deploy"], "session_id": "s1"},
        format="json",
        HTTP_USER_AGENT=HOOK_UA,
    )
    assert opened.status_code == 201, opened.content
    polled = api.get(f"/api/v1/approval-requests/{opened.json()['id']}?wait=0", HTTP_USER_AGENT=CLIENT_UA)
    assert polled.status_code == 200, polled.content
    assert _row(runtime, EnforcementPoint.CLIENT).product == "aimon-client/0.1.0"


@pytest.mark.django_db
def test_an_unknown_or_missing_user_agent_is_an_other_caller(api: APIClient, runtime: AgentRuntime) -> None:
    _tool_decision(api, "curl/8.5.0")
    assert _row(runtime, EnforcementPoint.OTHER).product == "curl/8.5.0"
    EnforcementPointCall.objects.all().delete()
    enforcement.forget()
    response = api.post("/api/v1/tool-decisions", {"tool": "Bash"}, format="json")  # no User-Agent
    assert response.status_code == 200
    assert _row(runtime, EnforcementPoint.OTHER).product == ""


@pytest.mark.django_db
def test_a_refused_token_records_nothing(runtime: AgentRuntime) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer aimon_" + "x" * 40)
    response = client.post(
        "/api/v1/tool-decisions", {"tool": "Bash"}, format="json", HTTP_USER_AGENT=GATEWAY_UA
    )
    assert response.status_code == 401
    assert not EnforcementPointCall.objects.exists()


@pytest.mark.django_db
def test_calls_within_a_minute_write_nothing_more(api: APIClient, runtime: AgentRuntime) -> None:
    _tool_decision(api, GATEWAY_UA)
    old = timezone.now() - dt.timedelta(hours=2)
    EnforcementPointCall.objects.filter(runtime=runtime).update(last_called_at=old)
    with CaptureQueriesContext(connection) as queries:
        for _ in range(5):
            _tool_decision(api, GATEWAY_UA)
    # Not a statement touches the table: the decision path is as it was.
    assert [q["sql"] for q in queries.captured_queries if TABLE in (q["sql"] or "")] == []
    assert _row(runtime, EnforcementPoint.GATEWAY).last_called_at == old
    # Another point of the same runtime is its own minute.
    _tool_decision(api, HOOK_UA)
    assert _row(runtime, EnforcementPoint.CLAUDE_HOOK).product == HOOK_UA


@pytest.mark.django_db
def test_after_the_resolution_the_next_call_writes_and_time_never_goes_back(
    api: APIClient, runtime: AgentRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tool_decision(api, GATEWAY_UA)
    monkeypatch.setattr(enforcement, "RESOLUTION", 0.0)  # as if a minute had passed each time
    old = timezone.now() - dt.timedelta(hours=2)
    EnforcementPointCall.objects.filter(runtime=runtime).update(
        last_called_at=old, product="aimon-gateway/0.0.9"
    )
    _tool_decision(api, GATEWAY_UA)
    row = _row(runtime, EnforcementPoint.GATEWAY)
    assert row.last_called_at > old
    assert row.product == GATEWAY_UA
    # A later time already stored (another process's write) is never moved back.
    later = timezone.now() + dt.timedelta(hours=1)
    EnforcementPointCall.objects.filter(runtime=runtime).update(last_called_at=later)
    _tool_decision(api, GATEWAY_UA)
    assert _row(runtime, EnforcementPoint.GATEWAY).last_called_at == later


@pytest.mark.django_db
def test_odd_user_agents_are_stored_plain_and_shown_escaped(
    api: APIClient, runtime: AgentRuntime, operator: User
) -> None:
    _tool_decision(api, "aimon-gateway/<script>alert(1)</script>")
    _tool_decision(api, '"><script>alert(2)</script> curl/8')
    assert {(row.point, row.product) for row in runtime.point_calls.all()} == {
        ("GATEWAY", "aimon-gateway"),
        ("OTHER", ""),
    }
    client = Client()
    client.force_login(operator)
    page = client.get("/runtimes/agent-one/").content.decode()
    assert "alert(" not in page


@pytest.mark.django_db
def test_a_failed_write_is_logged_and_the_call_goes_on(
    api: APIClient, runtime: AgentRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    # The table gone for a moment (renamed inside the test's transaction, undone with it):
    # the write fails in a savepoint of its own, and the decision is answered all the same.
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {quote(TABLE)} RENAME TO {quote(TABLE + '_away')}")
    _tool_decision(api, GATEWAY_UA)
    assert "could not note the MCP gateway call" in caplog.text
    assert api.get("/api/v1/tools", HTTP_USER_AGENT=GATEWAY_UA).status_code == 200
