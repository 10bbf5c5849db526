"""The model and its queryset refuse every change to an event; the table refuses unknown values (A1, A2)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from aimon_admin.audit import chain
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AppendOnlyError, AuditEvent
from aimon_admin.core.context import Channel
from tests.audit.helpers import event_row, raw_insert, record_events

pytestmark = pytest.mark.django_db


def unsaved_event(**overrides: object) -> AuditEvent:
    """A complete event that would link onto an empty log, built without audit_record()."""
    fields: dict[str, object] = {
        "seq": 1,
        "created_at": timezone.now(),
        "actor_label": "mallory",
        "channel": Channel.BROWSER,
        "action": AuditAction.RUNTIME_CREATED,
        "level": AuditLevel.INFO,
        "details": {"reason": "test"},
        "prev_hash": chain.GENESIS_HASH,
    }
    fields.update(overrides)
    event = AuditEvent(**fields)
    event.hash = chain.compute_hash(event.content())
    return event


def stored(event: AuditEvent) -> dict[str, object]:
    """The event's content and hash as the database holds them now."""
    fresh = AuditEvent.objects.get(pk=event.pk)
    return {**fresh.content(), "hash": fresh.hash}


# --- the model ----------------------------------------------------------------------------------


def test_content_holds_every_stored_field_but_the_hash() -> None:  # A2: nothing escapes the hash
    column_names = {field.attname for field in AuditEvent._meta.concrete_fields} - {"id", "hash"}
    assert set(unsaved_event().content()) == column_names == set(chain.CONTENT_FIELDS)


def test_saving_an_existing_event_is_refused() -> None:  # A2
    [event] = record_events(1)
    before = stored(event)

    event.details = {"number": 99}
    with pytest.raises(AppendOnlyError):
        event.save()

    assert stored(event) == before


def test_saving_an_event_read_back_from_the_database_is_refused() -> None:  # A2
    [event] = record_events(1)
    fetched = AuditEvent.objects.get(pk=event.pk)
    fetched.subject = "rewritten"

    with pytest.raises(AppendOnlyError):
        fetched.save(update_fields=["subject"])

    assert AuditEvent.objects.get(pk=event.pk).subject == event.subject


def test_saving_a_new_event_directly_is_refused() -> None:  # A2: audit_record() is the only writer
    event = unsaved_event()

    with pytest.raises(AppendOnlyError, match="audit_record"), transaction.atomic():
        event.save()

    assert not AuditEvent.objects.exists()


def test_creating_an_event_through_the_manager_is_refused() -> None:  # A2
    event = unsaved_event()
    fields = {
        field.attname: getattr(event, field.attname)
        for field in AuditEvent._meta.concrete_fields
        if field.attname != "id"
    }

    with pytest.raises(AppendOnlyError), transaction.atomic():
        AuditEvent.objects.create(**fields)

    assert not AuditEvent.objects.exists()


def test_deleting_an_event_is_refused() -> None:  # A2
    [event] = record_events(1)

    with pytest.raises(AppendOnlyError, match="append-only"):
        event.delete()

    assert AuditEvent.objects.filter(pk=event.pk).exists()


# --- the queryset -------------------------------------------------------------------------------


def test_queryset_update_is_refused() -> None:  # A2
    events = record_events(2)
    before = [stored(event) for event in events]

    with pytest.raises(AppendOnlyError, match="append-only"):
        AuditEvent.objects.filter(seq=1).update(subject="rewritten")
    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.all().update(level=AuditLevel.WARNING)

    assert [stored(event) for event in events] == before


def test_queryset_delete_is_refused() -> None:  # A2
    record_events(2)

    with pytest.raises(AppendOnlyError, match="append-only"):
        AuditEvent.objects.filter(seq=2).delete()
    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.all().delete()

    assert AuditEvent.objects.count() == 2


def test_queryset_bulk_create_is_refused() -> None:  # A2
    with pytest.raises(AppendOnlyError, match="one by one"):
        AuditEvent.objects.bulk_create([unsaved_event()])

    assert not AuditEvent.objects.exists()


def test_queryset_bulk_update_is_refused() -> None:  # A2
    [event] = record_events(1)
    event.subject = "rewritten"

    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.bulk_update([event], ["subject"])

    assert AuditEvent.objects.get(pk=event.pk).subject != "rewritten"


# --- check constraints --------------------------------------------------------------------------

UNKNOWN_VALUES = [
    ("action", "EVERYTHING_GRANTED"),
    ("level", "CRITICAL"),
    ("channel", "CARRIER_PIGEON"),
]


@pytest.mark.parametrize(("column", "value"), UNKNOWN_VALUES)
def test_raw_insert_of_an_unknown_value_is_refused_by_the_database(column: str, value: str) -> None:  # A1
    [event] = record_events(1)
    template = event_row(event, seq=2, prev_hash=event.hash, hash="f" * 64)
    # The same row with known values goes in, so only the unknown value is refused below.
    with transaction.atomic():
        assert raw_insert(template) == 1
        transaction.set_rollback(True)

    with pytest.raises(IntegrityError), transaction.atomic():
        raw_insert({**template, column: value})

    assert AuditEvent.objects.count() == 1


def test_raw_insert_of_a_seq_below_one_is_refused_by_the_database() -> None:  # A2
    [event] = record_events(1)

    with pytest.raises(IntegrityError), transaction.atomic():
        raw_insert(event_row(event, seq=0, prev_hash="a" * 64, hash="b" * 64))


@pytest.mark.parametrize(("column", "value"), UNKNOWN_VALUES)
def test_full_clean_refuses_an_unknown_value(column: str, value: str) -> None:  # A1
    unsaved_event().full_clean()  # the same event with known values is valid

    with pytest.raises(ValidationError) as raised:
        unsaved_event(**{column: value}).full_clean()

    assert column in raised.value.message_dict


@pytest.mark.parametrize(("column", "value"), UNKNOWN_VALUES)
def test_check_constraint_names_the_unknown_value(column: str, value: str) -> None:  # A1
    unsaved_event().validate_constraints()

    with pytest.raises(ValidationError, match=f"Unknown audit {column}"):
        unsaved_event(**{column: value}).validate_constraints()
