"""audit_record(), the one writer: what an event carries, and that it lives in the change's transaction."""

from __future__ import annotations

import contextvars
import itertools
from collections.abc import Callable

import pytest
from django.db import transaction

from aimon_admin.accounts.models import User
from aimon_admin.audit import chain
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import (
    AuditOutsideTransactionError,
    audit_chain_head,
    audit_record,
    audit_verify_chain,
)
from aimon_admin.core.actors import Actor
from aimon_admin.core.context import Channel, bound
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_create
from tests.audit.helpers import record_events
from tests.conftest import TEST_ACTOR


class ChangeFailedError(Exception):
    """Raised by a test after its change and event were written, to abort the transaction."""


def create_runtime_then_fail(name: str) -> None:
    """Create a runtime (which records its event), then fail in the same transaction."""
    with transaction.atomic():
        runtime_create(name=name, actor=TEST_ACTOR)
        # Both the change and its event are visible inside this transaction.
        assert AgentRuntime.objects.filter(name=name).exists()
        assert AuditEvent.objects.filter(action=AuditAction.RUNTIME_CREATED, subject=name).exists()
        raise ChangeFailedError


def record_then_fail() -> None:
    with transaction.atomic():
        audit_record(action=AuditAction.LOGOUT, actor=TEST_ACTOR)
        raise ChangeFailedError


# --- A3: the caller's transaction -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_audit_record_outside_a_transaction_is_refused() -> None:  # A3
    with pytest.raises(AuditOutsideTransactionError, match="inside the transaction"):
        audit_record(action=AuditAction.LOGOUT, actor=TEST_ACTOR)

    assert not AuditEvent.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_change_takes_its_event_with_it() -> None:  # A3
    events_before = AuditEvent.objects.count()

    with pytest.raises(ChangeFailedError):
        create_runtime_then_fail("doomed")

    # Neither the runtime nor its event survives the rollback.
    assert not AgentRuntime.objects.filter(name="doomed").exists()
    assert AuditEvent.objects.count() == events_before


@pytest.mark.django_db(transaction=True)
def test_a_committed_change_keeps_its_event() -> None:  # A3
    with transaction.atomic():
        runtime = runtime_create(name="kept", actor=TEST_ACTOR)

    event = AuditEvent.objects.get(action=AuditAction.RUNTIME_CREATED, subject="kept")
    assert event.runtime_id == runtime.pk


@pytest.mark.django_db(transaction=True)
def test_an_event_rolled_back_leaves_the_chain_head_where_it_was() -> None:  # A2, A3
    record_events(2)
    head = audit_chain_head()

    with pytest.raises(ChangeFailedError):
        record_then_fail()

    assert audit_chain_head() == head
    [after] = record_events(1, prefix="after")
    assert (after.seq, after.prev_hash) == (head[0] + 1, head[1])
    assert audit_verify_chain() == (3, None)


# --- what an event carries (A1) ---------------------------------------------------------------


@pytest.mark.django_db
def test_event_carries_actor_channel_request_id_runtime_and_details(
    operator: User, runtime: AgentRuntime
) -> None:  # A1
    with bound(channel=Channel.BROWSER, request_id="req-0123"), transaction.atomic():
        event = audit_record(
            action=AuditAction.RUNTIME_SETTINGS_CHANGED,
            actor=Actor.for_user(operator),
            level=AuditLevel.WARNING,
            runtime=runtime,
            session_key="session-9",
            subject_type="runtime",
            subject=runtime.name,
            details={"changed": ["ceiling"], "before": {"ceiling": "MUTATING"}, "after": {"ceiling": None}},
        )

    stored = AuditEvent.objects.get(pk=event.pk)
    assert stored.actor_id == operator.pk
    assert stored.actor_label == operator.username
    assert stored.channel == Channel.BROWSER
    assert stored.request_id == "req-0123"
    assert stored.action == AuditAction.RUNTIME_SETTINGS_CHANGED
    assert stored.level == AuditLevel.WARNING
    assert stored.runtime_id == runtime.pk
    assert stored.session_key == "session-9"
    assert (stored.subject_type, stored.subject) == ("runtime", "agent-one")
    assert stored.details == {
        "changed": ["ceiling"],
        "before": {"ceiling": "MUTATING"},
        "after": {"ceiling": None},
    }
    assert stored.created_at is not None


@pytest.mark.django_db
def test_event_is_info_by_default_and_a_system_actor_has_no_user() -> None:  # A1
    with transaction.atomic():
        event = audit_record(action=AuditAction.LOGOUT, actor=Actor.system("nightly-job"))

    stored = AuditEvent.objects.get(pk=event.pk)
    assert stored.level == AuditLevel.INFO
    assert stored.actor_id is None
    assert stored.actor_label == "nightly-job"
    assert stored.details == {}


@pytest.mark.django_db
def test_a_runtime_actor_is_recorded_against_its_runtime(runtime: AgentRuntime) -> None:  # A1
    with transaction.atomic():
        event = audit_record(action=AuditAction.TOKEN_REVOKED, actor=Actor.for_runtime(runtime))

    stored = AuditEvent.objects.get(pk=event.pk)
    assert stored.runtime_id == runtime.pk
    assert stored.actor_id is None
    assert stored.actor_label == "runtime:agent-one"


@pytest.mark.django_db
def test_each_channel_bound_is_the_channel_recorded() -> None:  # A1
    recorded = {}
    for channel in Channel:
        with bound(channel=channel, request_id=f"req-{channel.value}"), transaction.atomic():
            recorded[channel] = audit_record(action=AuditAction.LOGOUT, actor=TEST_ACTOR).pk

    for channel, pk in recorded.items():
        stored = AuditEvent.objects.get(pk=pk)
        assert (stored.channel, stored.request_id) == (channel, f"req-{channel.value}")


@pytest.mark.django_db
def test_bound_without_a_request_id_still_records_a_fresh_one() -> None:  # A1
    with bound(channel=Channel.CLI), transaction.atomic():
        first = audit_record(action=AuditAction.LOGOUT, actor=TEST_ACTOR)
    with bound(channel=Channel.CLI), transaction.atomic():
        second = audit_record(action=AuditAction.LOGOUT, actor=TEST_ACTOR)

    assert first.request_id
    assert second.request_id
    assert first.request_id != second.request_id


@pytest.mark.django_db
def test_nothing_bound_records_the_system_channel_and_no_request_id() -> None:  # A1
    def record() -> AuditEvent:
        with transaction.atomic():
            return audit_record(action=AuditAction.LOGOUT, actor=TEST_ACTOR)

    # A fresh context: whatever earlier tests bound (middleware binds per request) is not seen.
    event = contextvars.Context().run(record)

    stored = AuditEvent.objects.get(pk=event.pk)
    assert (stored.channel, stored.request_id) == (Channel.SYSTEM, "")


@pytest.mark.django_db
def test_details_are_refused_before_anything_is_written_if_not_canonical() -> None:  # A2
    with pytest.raises(chain.NotCanonicalError), transaction.atomic():
        audit_record(action=AuditAction.LOGOUT, actor=TEST_ACTOR, details={"ratio": 0.5})

    assert not AuditEvent.objects.exists()


@pytest.mark.django_db
def test_details_with_a_nul_character_are_refused_alike_on_every_database() -> None:  # A2
    with pytest.raises(chain.NotCanonicalError, match="NUL"), transaction.atomic():
        audit_record(action=AuditAction.LOGOUT, actor=TEST_ACTOR, details={"description": "a\x00b"})

    assert not AuditEvent.objects.exists()


@pytest.mark.django_db
def test_details_are_stored_normalized() -> None:  # A2
    with transaction.atomic():
        event = audit_record(action=AuditAction.LOGOUT, actor=TEST_ACTOR, details={"skills": ("a", "b")})

    assert AuditEvent.objects.get(pk=event.pk).details == {"skills": ["a", "b"]}


@pytest.mark.django_db
def test_over_long_text_is_cut_to_the_column_not_refused() -> None:  # A1: an event is never lost
    with transaction.atomic():
        event = audit_record(
            action=AuditAction.LOGIN_FAILED,
            actor=Actor.system("x" * 500),
            session_key="s" * 500,
            subject_type="t" * 100,
            subject="u" * 500,
        )

    stored = AuditEvent.objects.get(pk=event.pk)
    assert (len(stored.actor_label), len(stored.session_key)) == (200, 200)
    assert (len(stored.subject_type), len(stored.subject)) == (32, 300)
    assert audit_verify_chain() == (1, None)


# --- the chain (A2) ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_first_event_of_an_empty_log_links_to_genesis() -> None:  # A2
    assert audit_chain_head() == (0, chain.GENESIS_HASH)

    [first] = record_events(1)

    assert (first.seq, first.prev_hash) == (1, chain.GENESIS_HASH)
    assert audit_chain_head() == (1, first.hash)


@pytest.mark.django_db
def test_seq_increments_by_one_and_each_prev_hash_is_the_hash_before() -> None:  # A2
    events = record_events(4)

    assert [event.seq for event in events] == [1, 2, 3, 4]
    for before, after in itertools.pairwise(events):
        assert after.prev_hash == before.hash
    assert len({event.hash for event in events}) == 4


@pytest.mark.django_db
def test_events_written_by_services_share_one_chain(
    make_user: Callable[..., User], runtime: AgentRuntime
) -> None:  # A1, A2
    make_user("carol")
    stored = list(AuditEvent.objects.order_by("seq"))

    assert [event.action for event in stored] == [AuditAction.RUNTIME_CREATED, AuditAction.USER_CREATED]
    assert [event.seq for event in stored] == [1, 2]
    assert stored[1].prev_hash == stored[0].hash


@pytest.mark.django_db
def test_the_stored_hash_matches_the_content_read_back_from_the_database() -> None:  # A2
    with bound(channel=Channel.API, request_id="req-round-trip"), transaction.atomic():
        event = audit_record(
            action=AuditAction.RUNTIME_SETTINGS_CHANGED,
            actor=TEST_ACTOR,
            details={
                "zeta": {"nested": [1, True, None, "ünïcode ✓", {"b": 2, "a": 1}]},
                "alpha": 2**70,
                "negative": -(2**62),
                "numeric_text": "1.50",
                "empty": {},
            },
        )

    fetched = AuditEvent.objects.get(pk=event.pk)
    assert fetched.content() == event.content()
    assert chain.compute_hash(fetched.content()) == fetched.hash == event.hash


@pytest.mark.django_db
def test_nul_and_lone_surrogates_in_text_columns_do_not_fail_the_change() -> None:
    # A3: an event must always be writable, so the change it records is never refused
    # for the text a caller chose.
    with transaction.atomic():
        event = audit_record(
            action=AuditAction.LOGIN_FAILED,
            actor=Actor.system("anon\x00ymous"),
            subject="bad\x00name\udc80",
            session_key="s\x00",
        )
    event.refresh_from_db()
    assert event.actor_label == "anon\ufffdymous"
    assert event.subject == "bad\ufffdname?"
    assert event.session_key == "s\ufffd"
