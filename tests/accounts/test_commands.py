"""`create_user`: operator set-up from the command line (README.md, docs/operations.md)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent

pytestmark = pytest.mark.django_db


def run_create_user(monkeypatch: pytest.MonkeyPatch, *args: str, stdin: str = "") -> str:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    out = io.StringIO()
    call_command("create_user", *args, stdout=out)
    return out.getvalue()


def test_create_user_reads_the_password_from_stdin_and_gives_the_role(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = run_create_user(
        monkeypatch, "carol", "--role", "approver", "--password-stdin", stdin="a long pass phrase 9\n"
    )
    user = User.objects.get(username="carol")
    assert user.check_password("a long pass phrase 9")
    assert user.roles == ["approver"]
    assert out.strip() == "created carol (approver)"


def test_create_user_is_audited_from_the_command_line_without_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A1: user changes are events; the channel says how, and no secret is recorded.
    run_create_user(
        monkeypatch, "carol", "--role", "auditor", "--password-stdin", stdin="a long pass phrase 9\n"
    )
    event = AuditEvent.objects.get(action=AuditAction.USER_CREATED)
    assert event.channel == "CLI"
    assert event.actor_label.startswith("cli:")
    assert event.subject == "carol"
    assert event.details == {"roles": ["auditor"], "usable_password": True}
    assert "a long pass phrase" not in str(event.content())


def test_create_user_accepts_several_roles(monkeypatch: pytest.MonkeyPatch) -> None:
    run_create_user(
        monkeypatch,
        "dave",
        "--role",
        "operator",
        "--role",
        "auditor",
        "--password-stdin",
        stdin="a long pass phrase 9\n",
    )
    assert User.objects.get(username="dave").roles == ["operator", "auditor"]


def test_create_user_refuses_an_unknown_role(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CommandError, match="invalid choice: 'admin'"):
        run_create_user(monkeypatch, "eve", "--role", "admin", "--password-stdin", stdin="x\n")
    assert not User.objects.filter(username="eve").exists()


def test_create_user_refuses_an_existing_name(monkeypatch: pytest.MonkeyPatch) -> None:
    run_create_user(
        monkeypatch, "carol", "--role", "approver", "--password-stdin", stdin="a long pass phrase 9\n"
    )
    with pytest.raises(CommandError, match="already exists"):
        run_create_user(
            monkeypatch, "Carol", "--role", "approver", "--password-stdin", stdin="another pass 77\n"
        )
    assert User.objects.filter(username__iexact="carol").count() == 1


def test_create_user_refuses_an_empty_password(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CommandError, match="no password on standard input"):
        run_create_user(monkeypatch, "carol", "--role", "approver", "--password-stdin", stdin="\n")
    assert not User.objects.filter(username="carol").exists()


def test_create_user_refuses_a_weak_password_and_creates_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(CommandError, match=r"too short|too common|entirely numeric"):
        run_create_user(monkeypatch, "carol", "--role", "approver", "--password-stdin", stdin="123\n")
    assert not User.objects.filter(username="carol").exists()
    assert not AuditEvent.objects.filter(action=AuditAction.USER_CREATED).exists()


def test_create_user_requires_a_role(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CommandError, match="--role"):
        run_create_user(monkeypatch, "carol", "--password-stdin", stdin="a long pass phrase 9\n")


def test_create_user_without_password_stdin_makes_an_unusable_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = run_create_user(monkeypatch, "carol", "--role", "approver")
    assert not User.objects.get(username="carol").has_usable_password()
    assert "cannot sign in" in out
