"""A username typed at sign-in lands in the audit log cut to a sane length: anyone can type
150 characters there, no account needed, and one uncut widened the auditor's overview to
1,840 px."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.accounts.services import TYPED_USERNAME_MAX
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_a_long_username_typed_at_sign_in_is_cut_at_write_with_its_length_kept() -> None:
    typed = "u" * 150
    response = Client().post(reverse("accounts:login"), {"username": typed, "password": "wrong"})
    assert response.status_code == 303  # back to the sign-in page (post/redirect/get)
    failed = AuditEvent.objects.get(action=AuditAction.LOGIN_FAILED)
    assert failed.subject == "u" * (TYPED_USERNAME_MAX - 1) + "…"
    assert failed.details == {"username_length": 150}
    assert failed.actor_label == "anonymous"


def test_a_username_within_the_limit_is_kept_whole(operator: User) -> None:
    Client().post(reverse("accounts:login"), {"username": operator.username, "password": "wrong"})
    failed = AuditEvent.objects.get(action=AuditAction.LOGIN_FAILED)
    assert failed.subject == operator.username
    assert failed.details == {}


@pytest.mark.parametrize(
    ("length", "kept"), [(TYPED_USERNAME_MAX, TYPED_USERNAME_MAX), (TYPED_USERNAME_MAX + 1, None)]
)
def test_a_typed_username_is_cut_only_past_the_limit(length: int, kept: int | None) -> None:
    Client().post(reverse("accounts:login"), {"username": "x" * length, "password": "wrong"})
    failed = AuditEvent.objects.get(action=AuditAction.LOGIN_FAILED)
    assert len(failed.subject) == TYPED_USERNAME_MAX
    assert failed.subject.endswith("…") == (kept is None)
    assert failed.details == ({} if kept else {"username_length": length})
