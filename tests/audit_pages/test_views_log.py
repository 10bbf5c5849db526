"""The audit log page: combinable filters kept in the URL, keyset pages with no COUNT
and no OFFSET, htmx fragments, and any filter that cannot be read said in a sentence
beside its field, on the page with the form kept as typed (A1)."""

from __future__ import annotations

import datetime as dt
import html
import re
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from aimon_admin.accounts.models import User
from aimon_admin.audit import filters
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_record
from aimon_admin.audit_pages import filter_form as views
from aimon_admin.audit_pages import selectors
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime
from tests.audit_pages.pages_support import HTMX, logged_in

pytestmark = pytest.mark.django_db
LOG = "/audit/events/"


def write(action: AuditAction = AuditAction.RUNTIME_SETTINGS_CHANGED, **fields: object) -> AuditEvent:
    fields.setdefault("actor", Actor.system("pytest"))
    with transaction.atomic():
        return audit_record(action=action, **fields)  # type: ignore[arg-type]


def seqs(response) -> list[int]:  # type: ignore[no-untyped-def]
    return [int(s) for s in re.findall(r'<tr data-seq="(\d+)"', response.content.decode())]


@pytest.fixture
def mixed_log(runtime: AgentRuntime, other_runtime: AgentRuntime, approver: User) -> dict[str, AuditEvent]:
    """Events that differ in one field each, after the fixtures' own events."""
    return {
        "warning": write(AuditAction.AGENT_GRANTS_REVOKED, level=AuditLevel.WARNING, runtime=runtime),
        "by_alice": write(AuditAction.SESSION_CLEARED, actor=Actor.for_user(approver), session_key="s-1"),
        "session": write(AuditAction.SESSION_REVOKED, runtime=runtime, session_key="s-2"),
        "skill": write(
            AuditAction.SKILL_GRANTED, runtime=other_runtime, subject_type="skill", subject="deploy"
        ),
        "detail_skill": write(
            AuditAction.RULE_CHANGED, details={"skill": "deploy", "note": "named in details"}
        ),
        "tool": write(AuditAction.TOOL_DEFINITION_CHANGED, subject_type="tool", subject="shell"),
    }


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("level=WARNING", ["warning"]),
        ("actor=alice", ["by_alice"]),
        ("session=s-2", ["session"]),
        ("runtime=agent-two&action=SKILL_GRANTED", ["skill"]),
        ("subject=deploy", ["skill", "detail_skill"]),
        ("subject=shell", ["tool"]),
        ("action=SESSION_CLEARED&action=SESSION_REVOKED", ["by_alice", "session"]),
        ("action=SESSION_REVOKED&session=s-2&runtime=agent-one", ["session"]),
        ("action=SESSION_REVOKED&session=s-1", []),
    ],
)
def test_each_filter_narrows_the_log_and_filters_combine(
    auditor: User, mixed_log: dict[str, AuditEvent], query: str, expected: list[str]
) -> None:
    # A1: by action, level, actor, runtime, session, skill or tool.
    response = logged_in(auditor).get(f"{LOG}?{query}")
    assert response.status_code == 200
    assert seqs(response) == sorted((mixed_log[name].seq for name in expected), reverse=True)


def test_the_unfiltered_log_is_every_event_newest_first(
    auditor: User, mixed_log: dict[str, AuditEvent]
) -> None:
    response = logged_in(auditor).get(LOG)
    assert seqs(response) == list(AuditEvent.objects.order_by("-seq").values_list("seq", flat=True))


def test_time_range_filters_take_dates_and_date_times(auditor: User, runtime: AgentRuntime) -> None:
    old, mid, new = (write(subject=name) for name in ("old", "mid", "new"))
    client = logged_in(auditor)
    # The events are microseconds apart; filter on their own stamps.
    stamp = mid.created_at.isoformat()
    assert seqs(client.get(LOG, {"since": stamp, "action": "RUNTIME_SETTINGS_CHANGED"})) == [new.seq, mid.seq]
    assert seqs(client.get(LOG, {"until": stamp, "subject": "mid"})) == [mid.seq]  # until includes itself
    assert mid.seq in seqs(client.get(LOG, {"until": stamp}))
    assert new.seq not in seqs(client.get(LOG, {"until": stamp}))
    today = mid.created_at.date()
    assert seqs(
        client.get(LOG, {"since": today.isoformat(), "until": today.isoformat(), "subject": "old"})
    ) == [old.seq]
    tomorrow = (today + dt.timedelta(days=1)).isoformat()
    assert seqs(client.get(LOG, {"since": tomorrow})) == []


@pytest.mark.parametrize(
    ("query", "field", "problem"),
    [
        ("action=NOT_AN_ACTION", "action", filters.UNKNOWN_ACTION_MESSAGE.format(value="NOT_AN_ACTION")),
        ("level=DEBUG", "level", filters.UNKNOWN_LEVEL_MESSAGE.format(value="DEBUG")),
        ("level=INFO&level=WARNING", "level", filters.ONE_VALUE_MESSAGE.format(count=2)),
        ("since=yesterday", "since", filters.BAD_TIME_MESSAGE.format(value="yesterday")),
        ("until=2025-02-30", "until", filters.BAD_TIME_MESSAGE.format(value="2025-02-30")),
        ("since=2025-02-01&until=2025-01-01", "until", filters.UNTIL_BEFORE_SINCE_MESSAGE),
        ("before=abc", "before", filters.BAD_CURSOR_MESSAGE.format(value="abc")),
        ("before=0", "before", filters.BAD_CURSOR_MESSAGE.format(value="0")),
        ("runtime=no-such-runtime", "runtime", "No runtime is named 'no-such-runtime'."),
        ("colour=red", "colour", "The audit log has no filter named 'colour'."),
        ("actor=" + "x" * 201, "actor", filters.TOO_LONG_MESSAGE.format(limit=200)),
        ("session=a%00b", "session", filters.CONTROL_CHARACTER_MESSAGE),
    ],
)
def test_a_filter_that_cannot_be_read_is_said_on_the_page_the_form_kept(
    auditor: User, runtime: AgentRuntime, query: str, field: str, problem: str
) -> None:
    # Fail closed: never a 500, never the whole log shown as if it were filtered; and the
    # page stays, its form as typed, the sentence beside the field.
    response = logged_in(auditor).get(f"{LOG}?{query}")
    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    assert "<tr data-seq=" not in page
    assert 'role="search" aria-label="Filter the log"' in page
    assert f'data-field="{field}"' in page
    label = filters.FIELD_LABELS.get(field)
    assert (views.BAD_FILTER_MESSAGE.format(label=label, problem=problem) if label else problem) in page
    if field in ("actor", "runtime", "session", "since", "until"):
        assert f'aria-invalid="true" aria-describedby="f-{field}-error"' in page
        assert f'<p class="error" id="f-{field}-error">{problem}</p>' in page


def test_a_filter_error_reads_as_a_sentence_and_keeps_the_other_filters(
    auditor: User, runtime: AgentRuntime
) -> None:
    # It once read "The filter 'runtime' no runtime is named 'nope'", on a 400 page with no
    # form.
    response = logged_in(auditor).get(LOG, {"runtime": "nope", "actor": "alice", "level": "WARNING"})
    page = html.unescape(response.content.decode())
    assert "Runtime: No runtime is named 'nope'." in page
    assert 'name="runtime" type="text" value="nope" aria-invalid="true"' in page
    assert 'name="actor" type="text" value="alice"' in page
    assert '<option value="WARNING" selected>' in page
    assert '<a href="#f-runtime">in the form</a>' in page


def test_an_unreadable_filter_sent_by_htmx_is_shown_in_the_results(auditor: User) -> None:
    # htmx 2 swaps no 4xx: the results area says what is wrong, with status 200.
    response = logged_in(auditor).get(f"{LOG}?since=last+week", headers=HTMX)
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert page.lstrip().startswith('<div id="log-results"')
    assert 'data-field="since"' in page
    assert "Since: 'last week' is not a date or a date and time" in page


def test_times_are_utc_date_time_pickers_showing_the_same_bounds(auditor: User) -> None:
    # Since and Until are native date-time pickers in UTC; a date or a time with an offset,
    # given in the address, shows as the same bound; text that is no time stays a text box
    # holding it, beside its error.
    client = logged_in(auditor)
    page = client.get(LOG, {"since": "2025-01-31", "until": "2025-01-31"}).content.decode()
    assert 'name="since" type="datetime-local" value="2025-01-31T00:00">' in page
    assert 'name="until" type="datetime-local" value="2025-01-31T23:59">' in page
    assert 'Since <span class="help">(UTC)</span>' in page
    page = client.get(LOG, {"since": "2025-01-31T14:05:07+02:00"}).content.decode()
    assert 'name="since" type="datetime-local" value="2025-01-31T12:05:07" step="1"' in page
    page = client.get(LOG, {"since": "soon"}).content.decode()
    assert 'name="since" type="text" value="soon" aria-invalid="true"' in page


@pytest.mark.parametrize(
    ("typed", "end", "moment"),
    [
        ("2025-01-31", False, dt.datetime(2025, 1, 31, tzinfo=dt.UTC)),
        ("2025-01-31", True, dt.datetime(2025, 2, 1, tzinfo=dt.UTC)),
        ("2025-01-31T14:05", True, dt.datetime(2025, 1, 31, 14, 6, tzinfo=dt.UTC)),
        ("2025-01-31T14:05:07", True, dt.datetime(2025, 1, 31, 14, 5, 8, tzinfo=dt.UTC)),
        ("2025-01-31T14:05:07.123", True, dt.datetime(2025, 1, 31, 14, 5, 7, 124000, tzinfo=dt.UTC)),
        ("2025-01-31T14:05:07.123456", True, dt.datetime(2025, 1, 31, 14, 5, 7, 123457, tzinfo=dt.UTC)),
        ("2025-01-31T14:05+02:00", False, dt.datetime(2025, 1, 31, 12, 5, tzinfo=dt.UTC)),
        ("2025-01-31T14:05", False, dt.datetime(2025, 1, 31, 14, 5, tzinfo=dt.UTC)),
    ],
)
def test_until_includes_the_whole_last_unit_typed(typed: str, end: bool, moment: dt.datetime) -> None:
    # "Until 14:05" from a picker includes 14:05:30; a bare date, the whole day; and the
    # picker's value for a date means the same bound as the date.
    assert filters.parse_time("until" if end else "since", typed, end=end) == moment
    shown = filters.time_input_value(typed, end=end)
    assert shown is not None
    if "." not in typed:
        assert filters.parse_time("x", shown, end=end) == moment


def test_rows_show_the_exact_utc_time_with_the_relative_one_on_hover(auditor: User) -> None:
    # Times were once only relative ("less than a minute ago").
    event = write(subject="timed")
    page = logged_in(auditor).get(LOG).content.decode()
    row = re.search(rf'<tr data-seq="{event.seq}".*?</tr>', page, re.S).group(0)
    stamp = event.created_at.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    shown = event.created_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f'<time datetime="{stamp}" title="less than a minute ago">{shown}</time>' in row
    # A cut value keeps its whole on hover.
    assert '<td data-label="Skill or tool" title="timed">timed</td>' in row


def test_htmx_gets_the_results_fragment_and_the_canonical_url(auditor: User, mixed_log: dict) -> None:
    response = logged_in(auditor).get(f"{LOG}?level=WARNING&actor=&session=", headers=HTMX)
    page = response.content.decode()
    assert page.lstrip().startswith('<div id="log-results"')
    assert "<html" not in page
    assert response["HX-Push-Url"] == f"{LOG}?level=WARNING"
    assert seqs(response) == [mixed_log["warning"].seq]
    assert "HX-Request" in response["Vary"]


def test_the_full_page_keeps_the_filters_in_its_form_and_export_links(
    auditor: User, mixed_log: dict[str, AuditEvent]
) -> None:
    page = (
        logged_in(auditor)
        .get(f"{LOG}?action=SESSION_CLEARED&action=SESSION_REVOKED&actor=alice")
        .content.decode()
    )
    assert '<option value="SESSION_CLEARED" selected>' in page
    assert '<option value="SESSION_REVOKED" selected>' in page
    assert 'name="actor" type="text" value="alice"' in page
    query = "action=SESSION_CLEARED&amp;action=SESSION_REVOKED&amp;actor=alice"
    assert f'href="/audit/events/export.csv?{query}"' in page
    assert f'href="/audit/events/export.jsonl?{query}"' in page


def _link(page: str, label: str) -> str | None:
    match = re.search(rf'<a class="btn"(?: rel="next")? href="([^"]+)"[^>]*>{label}', page)
    return match.group(1).replace("&amp;", "&") if match else None


def test_pages_are_keyset_ranges_older_and_newest(
    auditor: User, runtime: AgentRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selectors, "PAGE_SIZE", 4)
    written = [write(subject=f"e{n}", session_key="paged").seq for n in range(10)]
    client = logged_in(auditor)
    response = client.get(LOG, {"session": "paged"})
    assert seqs(response) == written[::-1][:4]
    older = _link(response.content.decode(), "Older")
    assert older is not None
    assert dict(parse_qsl(urlsplit(older).query)) == {"session": "paged", "before": str(written[6])}
    second = client.get(older)
    assert seqs(second) == written[::-1][4:8]
    third = client.get(_link(second.content.decode(), "Older"))
    assert seqs(third) == written[::-1][8:]
    assert _link(third.content.decode(), "Older") is None  # the last page offers no older one
    assert _link(third.content.decode(), "Newest") == f"{LOG}?session=paged"


def test_several_actions_page_in_seq_order_across_their_branches(
    auditor: User, runtime: AgentRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selectors, "PAGE_SIZE", 3)
    actions = [AuditAction.SESSION_CLEARED, AuditAction.SESSION_REVOKED, AuditAction.RULE_CREATED] * 3
    written = [write(action).seq for action in actions]
    wanted = [seq for seq, action in zip(written, actions, strict=True) if action != AuditAction.RULE_CREATED]
    client = logged_in(auditor)
    shown: list[int] = []
    url: str | None = f"{LOG}?action=SESSION_CLEARED&action=SESSION_REVOKED"
    while url:
        response = client.get(url)
        shown += seqs(response)
        url = _link(response.content.decode(), "Older")
    assert shown == wanted[::-1]


@pytest.mark.parametrize(
    "query",
    [
        "",
        "level=INFO",
        "actor=pytest",
        "subject=deploy",
        "action=RULE_CHANGED&action=SKILL_GRANTED",
        "since=2020-01-01",
    ],
)
def test_no_page_counts_the_table_or_skips_with_offset(
    auditor: User, mixed_log: dict[str, AuditEvent], query: str
) -> None:
    client = logged_in(auditor)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"{LOG}?{query}&before=999999" if query else f"{LOG}?before=999999")
    assert response.status_code == 200
    audit_sql = [q["sql"].upper() for q in queries.captured_queries if "AUDIT_AUDITEVENT" in q["sql"].upper()]
    assert audit_sql
    assert not [sql for sql in audit_sql if "COUNT(" in sql or "OFFSET" in sql]
    assert all("LIMIT" in sql for sql in audit_sql)


def test_filter_messages_name_the_problem() -> None:
    with pytest.raises(filters.FilterError) as caught:
        filters.parse_filters({"level": ["LOUD"]})
    assert (caught.value.field, caught.value.problem) == (
        "level",
        filters.UNKNOWN_LEVEL_MESSAGE.format(value="LOUD"),
    )


def test_every_filter_has_an_index_that_ends_in_seq() -> None:
    # "filter X ORDER BY seq DESC LIMIT 51" must be one index range at a million events.
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, AuditEvent._meta.db_table)
    indexes = {name for name, spec in constraints.items() if spec["index"]}
    assert {
        "audit_action_seq",
        "audit_runtime_seq",
        "audit_level_seq",
        "audit_actor_label_seq",
        "audit_session_seq",
        "audit_subject_seq",
        "audit_detail_skill_seq",
    } <= indexes
    for name in ("audit_level_seq", "audit_actor_label_seq", "audit_session_seq", "audit_subject_seq"):
        assert constraints[name]["columns"][-1] == "seq", name
