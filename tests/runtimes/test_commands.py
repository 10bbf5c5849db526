"""`create_runtime` (docs/api.md): the token alone on the last line, only its hash stored."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.tokens import token_hash
from tests.runtimes.factories import bearer_client

pytestmark = pytest.mark.django_db


def create_runtime(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_runtime", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_runtime_prints_a_working_token_alone_on_its_last_line() -> None:
    out, err = create_runtime("builder")
    token = out.strip().splitlines()[-1]
    assert token.startswith("aimon_")
    assert out.strip() == token
    assert "shown only once" in err
    assert RuntimeToken.objects.get().token_hash == token_hash(token)
    assert bearer_client(token).get("/api/v1/runtime").json() == {
        "name": "builder",
        "ceiling": "MUTATING",
        "exempt_at_or_below": "READ_ONLY",
        "token_prefix": token[:12],
    }


def test_create_runtime_takes_ceiling_threshold_and_owner(operator: User) -> None:
    create_runtime(
        "reader", "--ceiling", "READ_ONLY", "--exempt-at-or-below", "MUTATING", "--owner", "olivia"
    )
    runtime = AgentRuntime.objects.get(name="reader")
    assert (runtime.ceiling, runtime.exempt_at_or_below, runtime.owner) == (
        "READ_ONLY",
        "MUTATING",
        operator,
    )
    actions = list(AuditEvent.objects.order_by("seq").values_list("action", "channel"))
    assert actions[-2:] == [(AuditAction.RUNTIME_CREATED, "CLI"), (AuditAction.TOKEN_ISSUED, "CLI")]


def test_create_runtime_refuses_an_unknown_owner_and_creates_nothing() -> None:
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        create_runtime("builder", "--owner", "nobody")
    assert not AgentRuntime.objects.exists()


def test_create_runtime_refuses_an_existing_name() -> None:
    create_runtime("builder")
    with pytest.raises(CommandError, match="already exists"):
        create_runtime("builder")
    assert RuntimeToken.objects.count() == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["builder", "--ceiling", "WRITE"], "invalid choice: 'WRITE'"),
        (["builder", "--exempt-at-or-below", "read_only"], "invalid choice: 'read_only'"),
        (["Bad Name"], "lower-case letters"),
    ],
)
def test_create_runtime_refuses_bad_values(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        create_runtime(*args)
    assert not AgentRuntime.objects.exists()
