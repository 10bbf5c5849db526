"""One event's page: every field, details readable, before/after side by side, its place
in the chain and the links to what it concerns (A1, A2)."""

from __future__ import annotations

import re

import pytest
from django.db import transaction
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.audit.services import audit_record
from aimon_admin.audit_pages import event_views as pages
from aimon_admin.core.actors import Actor
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_update_settings
from tests.audit_pages.pages_support import escalate, logged_in
from tests.conftest import TEST_ACTOR

pytestmark = pytest.mark.django_db
ROW = (
    '<tr class="changed"><th scope="row">{key}</th>'
    '<td class="wrap">{before}</td><td class="wrap">{after}</td></tr>'
)


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_a_settings_change_shows_each_changed_field_before_and_after(
    auditor: User, runtime: AgentRuntime, operator: User
) -> None:
    # A1: runtime settings changes carry before/after; the page sets them side by side.
    runtime_update_settings(
        runtime=runtime,
        actor=Actor.for_user(operator),
        ceiling="READ_ONLY",
        exempt_at_or_below="READ_ONLY",
        owner=operator,
        description="",
    )
    event = AuditEvent.objects.get(action=AuditAction.RUNTIME_SETTINGS_CHANGED)
    page = logged_in(auditor).get(reverse("audit:event", args=[event.seq])).content.decode()
    compare = page[page.index('<table class="audit-compare">') : page.index("</table>")]
    # Recorded codes read as words, each code on hover.
    assert (
        ROW.format(
            key="ceiling",
            before='<span title="MUTATING">Writes</span>',
            after='<span title="READ_ONLY">Read-only</span>',
        )
        in compare
    )
    assert ROW.format(key="owner", before="—", after="olivia") in compare
    assert "exempt_at_or_below" not in compare  # only what changed
    assert f"<dt>Through</dt><dd>{event.get_channel_display()}</dd>" in page
    assert event.hash in page
    assert event.prev_hash in page
    assert pages.HASH_OK in page
    assert pages.LINK_OK.format(seq=event.seq - 1) in page
    assert f'href="{reverse("runtimes:detail", args=[runtime.name])}"' in page


def test_comparisons_read_every_shape_writers_use() -> None:
    details = {
        "before": "IGNORE",
        "after": "TRUST",
        "tools": [{"tool": "shell", "before": {"level": "MUTATING"}, "after": {"level": "READ_ONLY"}}],
        "claims_before": {"readOnlyHint": False},
        "claims_after": {"readOnlyHint": True},
        "server": "files",
    }
    found, used = pages.comparisons(details)
    assert [(c.label, [(r.key, r.before, r.after, r.changed) for r in c.rows]) for c in found] == [
        ("Change", [("value", "IGNORE", "TRUST", True)]),
        ("Claims", [("readOnlyHint", "false", "true", True)]),
        ("Tools: shell", [("level", "MUTATING", "READ_ONLY", True)]),
    ]
    assert used == {"before", "after", "claims_before", "claims_after", "tools"}


def test_the_first_event_is_chained_to_genesis_and_neighbours_are_linked(
    auditor: User, runtime: AgentRuntime
) -> None:
    client = logged_in(auditor)
    first = client.get(reverse("audit:event", args=[1])).content.decode()
    assert "It is the first event, chained to the genesis hash." in first
    assert 'rel="prev"' not in first
    assert f'href="{reverse("audit:event", args=[2])}"' in first
    second = client.get(reverse("audit:event", args=[2])).content.decode()
    assert f'rel="prev" href="{reverse("audit:event", args=[1])}"' in second


def test_an_escalation_event_shows_its_grant_reach_and_state(
    auditor: User,
    make_user,
    runtime: AgentRuntime,  # type: ignore[no-untyped-def]
) -> None:
    # S6: the event of an escalation leads to the grant and says how far it reaches.
    owner = make_user("owen", "approver")
    runtime.owner = owner
    runtime.save(update_fields=["owner"])
    grant = escalate(runtime, owner, reason="Nightly deploy")
    event = AuditEvent.objects.get(action=AuditAction.SKILL_GRANT_ESCALATED)
    page = logged_in(auditor).get(reverse("audit:event", args=[event.seq])).content.decode()
    plain = text(page)
    assert "The grant" in plain
    assert (
        "All sessions of runtime agent-one, no expiry, survives Clear, "
        "holds until it is revoked, on its own or with Revoke agent-wide" in plain
    )
    assert '<span class="badge badge-warn">In force</span>' in page
    assert str(grant.request_id) in page
    assert "Nightly deploy" in plain
    assert "escalated" in plain


def test_details_that_are_not_comparisons_are_listed_readably(auditor: User, runtime: AgentRuntime) -> None:
    with transaction.atomic():
        event = audit_record(
            action=AuditAction.SESSION_CLEARED,
            actor=TEST_ACTOR,
            runtime=runtime,
            session_key="s-9",
            details={"removed": 3, "agent": False, "nested": {"a": [1, 2]}},
        )
    page = logged_in(auditor).get(reverse("audit:event", args=[event.seq])).content.decode()
    assert '<dt>removed</dt><dd class="wrap">3</dd>' in page
    assert '<dt>agent</dt><dd class="wrap">no</dd>' in page
    assert '<pre class="json">{\n  &quot;a&quot;: [\n    1,\n    2\n  ]\n}</pre>' in page
    assert "/audit/in-force/?runtime=agent-one&amp;session=s-9&amp;at=" in page
    assert "/audit/events/?session=s-9" in page


def test_an_unknown_event_is_404(auditor: User) -> None:
    assert logged_in(auditor).get(reverse("audit:event", args=[999])).status_code == 404
