"""Every named constraint of the approvals models, through full_clean() and through raw SQL.

Each invalid row is refused twice: by Django's validation (full_clean, as forms and
services call it) and by the database itself (a raw INSERT or UPDATE around the ORM).
Each has a valid twin that both accept, so no test passes by refusing everything.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.approvals.models import (
    ApprovalAllow,
    ApprovalItem,
    ApprovalRequest,
    Grant,
    Session,
    SkillRule,
    ToolRule,
)
from aimon_admin.runtimes.models import AgentRuntime

pytestmark = pytest.mark.django_db
MODELS = (Session, Grant, ApprovalRequest, ApprovalItem, ApprovalAllow, SkillRule, ToolRule)


@dataclass
class World:
    runtime: AgentRuntime
    other_runtime: AgentRuntime
    session: Session
    request: ApprovalRequest

    def grant(self, **fields: object) -> Grant:
        values: dict[str, object] = {
            "runtime": self.runtime,
            "scope": "AGENT",
            "decision": "ALLOW",
            "skill": "deploy",
            "session": None,
            "turn_id": "",
            "origin": "ANSWER",
            "created_at": timezone.now(),
        }
        values.update(fields)
        return Grant(**values)

    def session_grant(self, **fields: object) -> Grant:
        return self.grant(**{"scope": "SESSION", "session": self.session, **fields})

    def turn_grant(self, **fields: object) -> Grant:
        return self.grant(**{"scope": "TURN", "session": self.session, "turn_id": "t-1", **fields})

    def new_request(self, **fields: object) -> ApprovalRequest:
        now = timezone.now()
        values: dict[str, object] = {
            "runtime": self.runtime,
            "created_at": now,
            "expires_at": now + dt.timedelta(minutes=5),
        }
        values.update(fields)
        return ApprovalRequest(**values)

    def item(self, **fields: object) -> ApprovalItem:
        values: dict[str, object] = {"request": self.request, "position": 0, "skill": "deploy"}
        values.update(fields)
        return ApprovalItem(**values)

    def allow(self, **fields: object) -> ApprovalAllow:
        """P3: one person's allow of an item needing two (the item and the person made once)."""
        item = ApprovalItem.objects.get_or_create(
            request=self.request, skill="two", defaults={"position": 1, "approvers": 2}
        )[0]
        user = User.objects.get_or_create(username="allower")[0]
        values: dict[str, object] = {
            "item": item,
            "user": user,
            "answer": "ALLOW_SESSION",
            "created_at": timezone.now(),
        }
        values.update(fields)
        return ApprovalAllow(**values)

    def rule(self, **fields: object) -> SkillRule:
        now = timezone.now()
        values: dict[str, object] = {
            "runtime": self.runtime,
            "pattern": "deploy-*",
            "action": "DENY",
            "created_at": now,
            "updated_at": now,
        }
        values.update(fields)
        return SkillRule(**values)

    def tool_rule(self, **fields: object) -> ToolRule:
        now = timezone.now()
        values: dict[str, object] = {
            "runtime": self.runtime,
            "tool": "Bash",
            "pattern": "git status:*",
            "action": "ALLOW",
            "created_at": now,
            "updated_at": now,
        }
        values.update(fields)
        return ToolRule(**values)

    def tool_request(self, **fields: object) -> ApprovalRequest:
        values: dict[str, object] = {
            "kind": "TOOL",
            "tool": "Bash",
            "arguments": {"command": "ls"},
            "arguments_digest": "sha256:" + "0" * 64,
            "session": self.session,
        }
        values.update(fields)
        return self.new_request(**values)

    def new_session(self, **fields: object) -> Session:
        now = timezone.now()
        values: dict[str, object] = {
            "runtime": self.runtime,
            "session_id": "s-2",
            "first_seen_at": now,
            "last_seen_at": now,
        }
        values.update(fields)
        return Session(**values)


@pytest.fixture
def world(runtime: AgentRuntime, other_runtime: AgentRuntime) -> World:
    now = timezone.now()
    session = Session.objects.create(runtime=runtime, session_id="s-1", last_seen_at=now)
    request = ApprovalRequest.objects.create(runtime=runtime, session=session, expires_at=now)
    return World(runtime=runtime, other_runtime=other_runtime, session=session, request=request)


def raw_insert(instance: models.Model) -> None:
    """INSERT the instance's row with raw SQL: no validation, no ORM save()."""
    meta = instance._meta
    fields = [f for f in meta.concrete_fields if not isinstance(f, models.AutoField)]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    values = [f.get_db_prep_save(getattr(instance, f.attname), connection) for f in fields]
    placeholders = ", ".join(["%s"] * len(fields))
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {meta.db_table} ({columns}) VALUES ({placeholders})", values)


def saved(instance: models.Model) -> models.Model:
    instance.save()
    return instance


def constraint(model: type[models.Model], name: str) -> models.BaseConstraint:
    [found] = [c for c in model._meta.constraints if c.name == name]
    return found


# Each case: (constraint, the model, a builder of the offending row; the builder may save
# the rows it conflicts with first), and one valid twin that must pass both ways.
Builder = Callable[[World], models.Model]
CASES: list[tuple[str, type[models.Model], Builder, Builder]] = [
    # Grant: enums
    ("grant_scope_valid", Grant, lambda w: w.grant(scope="FOREVER"), lambda w: w.grant()),
    ("grant_decision_valid", Grant, lambda w: w.grant(decision="ASK"), lambda w: w.grant(decision="DENY")),
    ("grant_origin_valid", Grant, lambda w: w.grant(origin="HOOK"), lambda w: w.grant(origin="ESCALATION")),
    ("grant_approvers_valid", Grant, lambda w: w.grant(approvers=4), lambda w: w.grant(approvers=3)),  # P3
    (
        "grant_revoke_reason_valid",
        Grant,
        lambda w: w.grant(revoked_at=timezone.now(), revoke_reason="BORED"),
        lambda w: w.grant(revoked_at=timezone.now(), revoke_reason="CLEAR"),
    ),
    # Grant: scope matches holder (S4, S6)
    (
        "grant_scope_matches_holder",
        Grant,
        lambda w: w.grant(scope="AGENT", session=w.session),
        lambda w: w.grant(scope="AGENT"),
    ),
    (
        "grant_scope_matches_holder",
        Grant,
        lambda w: w.grant(scope="AGENT", turn_id="t-1"),
        lambda w: w.grant(scope="AGENT", skill="other"),
    ),
    ("grant_scope_matches_holder", Grant, lambda w: w.grant(scope="SESSION"), lambda w: w.session_grant()),
    (
        "grant_scope_matches_holder",
        Grant,
        lambda w: w.session_grant(turn_id="t-1"),
        lambda w: w.session_grant(skill="other"),
    ),
    (
        "grant_scope_matches_holder",
        Grant,
        lambda w: w.grant(scope="TURN", turn_id="t-1"),
        lambda w: w.turn_grant(),
    ),
    (
        "grant_scope_matches_holder",
        Grant,
        lambda w: w.turn_grant(turn_id=""),
        lambda w: w.turn_grant(turn_id="t-2"),
    ),
    # Grant: revocation records why (S10)
    (
        "grant_revocation_has_reason",
        Grant,
        lambda w: w.grant(revoked_at=timezone.now()),
        lambda w: w.grant(revoked_at=timezone.now(), revoke_reason="REVOKE_AGENT"),
    ),
    # Grant: an abort only ever denies for the session (S9)
    (
        "grant_abort_is_session_deny",
        Grant,
        lambda w: w.session_grant(origin="ABORT", decision="ALLOW"),
        lambda w: w.session_grant(origin="ABORT", decision="DENY"),
    ),
    (
        "grant_abort_is_session_deny",
        Grant,
        lambda w: w.grant(origin="ABORT", decision="DENY"),
        lambda w: w.grant(origin="ESCALATION", decision="DENY"),
    ),
    (
        "grant_abort_is_session_deny",
        Grant,
        lambda w: w.turn_grant(origin="ABORT", decision="DENY"),
        lambda w: w.turn_grant(origin="ANSWER", decision="DENY"),
    ),
    # Grant: one active grant per key; a revoked one does not block, another key does not clash
    (
        "grant_one_active_agent_grant",
        Grant,
        lambda w: (saved(w.grant()), w.grant(decision="DENY"))[1],
        lambda w: (saved(w.grant(revoked_at=timezone.now(), revoke_reason="SUPERSEDED")), w.grant())[1],
    ),
    (
        "grant_one_active_agent_grant",
        Grant,
        lambda w: (saved(w.grant()), w.grant(origin="ESCALATION"))[1],
        lambda w: (saved(w.grant()), w.grant(runtime=w.other_runtime))[1],
    ),
    (
        "grant_one_active_session_grant",
        Grant,
        lambda w: (saved(w.session_grant()), w.session_grant(decision="DENY"))[1],
        lambda w: (
            saved(w.session_grant(revoked_at=timezone.now(), revoke_reason="CLEAR")),
            w.session_grant(),
        )[1],
    ),
    (
        "grant_one_active_session_grant",
        Grant,
        lambda w: (saved(w.session_grant()), w.session_grant(origin="ABORT", decision="DENY"))[1],
        lambda w: (saved(w.session_grant()), saved(w.grant()), w.turn_grant())[2],  # other scopes: other keys
    ),
    (
        "grant_one_active_turn_grant",
        Grant,
        lambda w: (saved(w.turn_grant()), w.turn_grant())[1],
        lambda w: (saved(w.turn_grant()), w.turn_grant(turn_id="t-2"))[1],
    ),
    (
        "grant_one_active_turn_grant",
        Grant,
        lambda w: (saved(w.turn_grant()), w.turn_grant(decision="DENY"))[1],
        lambda w: (saved(w.turn_grant(revoked_at=timezone.now(), revoke_reason="EXPIRED")), w.turn_grant())[
            1
        ],
    ),
    # Session (S12)
    (
        "session_unique_per_runtime",
        Session,
        lambda w: w.new_session(session_id="s-1"),
        lambda w: w.new_session(session_id="s-1", runtime=w.other_runtime),
    ),
    # ApprovalRequest
    (
        "request_status_valid",
        ApprovalRequest,
        lambda w: w.new_request(status="DONE"),
        lambda w: w.new_request(),
    ),
    (
        "request_idempotency_key_unique",
        ApprovalRequest,
        lambda w: (saved(w.new_request(idempotency_key="k-1")), w.new_request(idempotency_key="k-1"))[1],
        lambda w: (
            saved(w.new_request(idempotency_key="k-1")),
            w.new_request(runtime=w.other_runtime, idempotency_key="k-1"),
        )[1],
    ),
    (
        "request_idempotency_key_unique",
        ApprovalRequest,
        lambda w: (saved(w.new_request(idempotency_key="k-2")), w.new_request(idempotency_key="k-2"))[1],
        lambda w: (saved(w.new_request()), saved(w.new_request()), w.new_request())[2],  # blank: any number
    ),
    # ApprovalItem
    (
        "approval_item_skill_unique",
        ApprovalItem,
        lambda w: (saved(w.item()), w.item(position=1))[1],
        lambda w: (saved(w.item()), w.item(position=1, skill="notify"))[1],
    ),
    (
        "approval_item_decision_valid",
        ApprovalItem,
        lambda w: w.item(decision="ASK"),  # only a concrete answer is ever recorded
        lambda w: w.item(decision="DENY"),
    ),
    (
        "approval_item_scope_valid",
        ApprovalItem,
        lambda w: w.item(scope="WORLD"),
        lambda w: w.item(scope="TURN"),
    ),
    (
        "approval_item_widest_scope_valid",
        ApprovalItem,
        lambda w: w.item(widest_scope=""),
        lambda w: w.item(widest_scope="SESSION"),
    ),
    (
        "approval_item_source_valid",
        ApprovalItem,
        lambda w: w.item(decision="ALLOW", source="HOOK"),  # S11: no other source decides
        lambda w: w.item(decision="ALLOW", source="INVOKING_SESSION"),
    ),
    # The two-person rule (P3): 1 to 3 people, never more allows than needed, one per person.
    (
        "approval_item_approvers_valid",
        ApprovalItem,
        lambda w: w.item(approvers=4),
        lambda w: w.item(approvers=3),
    ),
    (
        "approval_item_allows_within_approvers",
        ApprovalItem,
        lambda w: w.item(approvers=2, allows_given=3),
        lambda w: w.item(approvers=2, allows_given=2),
    ),
    ("rule_approvers_valid", SkillRule, lambda w: w.rule(approvers=0), lambda w: w.rule(approvers=2)),
    (
        "tool_rule_approvers_valid",
        ToolRule,
        lambda w: w.tool_rule(approvers=4),
        lambda w: w.tool_rule(approvers=3),
    ),
    ("approval_allow_answer_valid", ApprovalAllow, lambda w: w.allow(answer="MAYBE"), lambda w: w.allow()),
    (
        "approval_allow_once_per_person",
        ApprovalAllow,
        lambda w: (saved(w.allow()), w.allow(answer="ALLOW_AGENT"))[1],
        lambda w: (saved(w.allow()), w.allow(user=User.objects.get_or_create(username="another")[0]))[1],
    ),
    # SkillRule
    ("rule_action_valid", SkillRule, lambda w: w.rule(action="MAYBE"), lambda w: w.rule(action="ASK")),
    (
        "rule_widest_scope_valid",
        SkillRule,
        lambda w: w.rule(widest_scope="ALL"),
        lambda w: w.rule(widest_scope="TURN"),
    ),
    (
        "rule_pattern_unique_per_runtime",
        SkillRule,
        lambda w: (saved(w.rule()), w.rule(action="ALLOW"))[1],
        lambda w: (saved(w.rule()), w.rule(runtime=w.other_runtime))[1],
    ),
    (
        "rule_pattern_unique_global",
        SkillRule,
        lambda w: (saved(w.rule(runtime=None)), w.rule(runtime=None, action="ALLOW"))[1],
        lambda w: (saved(w.rule(runtime=None)), w.rule())[1],  # a runtime's own rule beside a global one
    ),
    # Tool grants (U3): a skill grant carries no tool fields; keys include the pattern
    ("grant_kind_valid", Grant, lambda w: w.grant(kind="HOOK"), lambda w: w.grant(kind="TOOL", pattern="ls")),
    (
        "grant_skill_has_no_tool_fields",
        Grant,
        lambda w: w.grant(pattern="git:*"),
        lambda w: w.grant(kind="TOOL", server="git", pattern="git:*"),
    ),
    (
        "grant_skill_has_no_tool_fields",
        Grant,
        lambda w: w.grant(server="git"),
        lambda w: w.grant(kind="TOOL", server="git"),
    ),
    (
        "grant_one_active_agent_grant",
        Grant,
        lambda w: (saved(w.grant(kind="TOOL", pattern="ls")), w.grant(kind="TOOL", pattern="ls"))[1],
        lambda w: (saved(w.grant(kind="TOOL", pattern="ls")), w.grant(kind="TOOL", pattern="ls:*"))[1],
    ),
    (
        "grant_one_active_session_grant",
        Grant,
        lambda w: (saved(w.session_grant(kind="TOOL")), w.session_grant(kind="TOOL", decision="DENY"))[1],
        lambda w: (saved(w.session_grant(kind="TOOL")), w.session_grant())[1],  # the skill of that name
    ),
    # Tool requests (U2)
    ("request_kind_valid", ApprovalRequest, lambda w: w.new_request(kind="HOOK"), lambda w: w.tool_request()),
    (
        "request_tool_fields_match_kind",
        ApprovalRequest,
        lambda w: w.tool_request(arguments_digest=""),
        lambda w: w.tool_request(arguments={}),
    ),
    (
        "request_tool_fields_match_kind",
        ApprovalRequest,
        lambda w: w.new_request(tool="Bash"),
        lambda w: w.new_request(),
    ),
    # Tool rules (U1, U5)
    (
        "tool_rule_action_valid",
        ToolRule,
        lambda w: w.tool_rule(action="MAYBE"),
        lambda w: w.tool_rule(action="DENY"),
    ),
    (
        "tool_rule_tool_name_valid",
        ToolRule,
        lambda w: w.tool_rule(tool=""),
        lambda w: w.tool_rule(pattern=""),
    ),
    (
        "tool_rule_pre_approval_is_runtime_allow",
        ToolRule,
        lambda w: w.tool_rule(unattended=True, action="ASK"),
        lambda w: w.tool_rule(unattended=True),
    ),
    (
        "tool_rule_pre_approval_is_runtime_allow",
        ToolRule,
        lambda w: w.tool_rule(unattended=True, runtime=None),
        lambda w: w.tool_rule(runtime=None),
    ),
    (
        "tool_rule_note_length",
        ToolRule,
        lambda w: w.tool_rule(note="n" * 1001),
        lambda w: w.tool_rule(note="n" * 1000),
    ),
    (
        "tool_rule_unique_per_runtime",
        ToolRule,
        lambda w: (saved(w.tool_rule()), w.tool_rule(action="DENY"))[1],
        lambda w: (saved(w.tool_rule()), w.tool_rule(unattended=True))[1],  # a pre-approval beside it
    ),
    (
        "tool_rule_unique_global",
        ToolRule,
        lambda w: (saved(w.tool_rule(runtime=None)), w.tool_rule(runtime=None, action="ASK"))[1],
        lambda w: (saved(w.tool_rule(runtime=None)), w.tool_rule(runtime=None, server="git"))[1],
    ),
    # Text a person or a runtime fills has a limit.
    ("rule_note_length", SkillRule, lambda w: w.rule(note="n" * 1001), lambda w: w.rule(note="n" * 1000)),
    (
        "request_reason_length",
        ApprovalRequest,
        lambda w: w.new_request(reason="r" * 2001),
        lambda w: w.new_request(reason="r" * 2000),
    ),
]
CASE_IDS = [f"{name}-{n}" for n, (name, *_) in enumerate(CASES)]


def test_every_named_constraint_has_a_case() -> None:
    named = {c.name for model in MODELS for c in model._meta.constraints}
    assert named == {name for name, *_ in CASES}


@pytest.mark.parametrize(("name", "model", "invalid", "valid"), CASES, ids=CASE_IDS)
def test_full_clean_refuses_the_row(
    world: World, name: str, model: type, invalid: Builder, valid: Builder
) -> None:
    instance = invalid(world)
    named = constraint(model, name)

    with pytest.raises(ValidationError) as refused:
        instance.full_clean()

    # An enum column is refused by its choices first; the constraint itself refuses it too.
    with pytest.raises(ValidationError) as by_constraint:
        named.validate(model, instance)
    message = named.violation_error_message
    assert by_constraint.value.messages == [message]
    if isinstance(named, models.CheckConstraint) and name.endswith("_valid"):
        assert refused.value.message_dict  # a field's error
    else:
        assert message in refused.value.messages


@pytest.mark.parametrize(("name", "model", "invalid", "valid"), CASES, ids=CASE_IDS)
def test_full_clean_accepts_the_valid_twin(
    world: World, name: str, model: type, invalid: Builder, valid: Builder
) -> None:
    valid(world).full_clean()


def violated_by(model: type[models.Model], instance: models.Model) -> set[str]:
    """The names of the model's constraints that Django finds the instance breaks."""
    names = set()
    for named in model._meta.constraints:
        try:
            named.validate(model, instance)
        except ValidationError:
            names.add(named.name)
    return names


@pytest.mark.parametrize(("name", "model", "invalid", "valid"), CASES, ids=CASE_IDS)
def test_the_database_refuses_a_raw_insert(
    world: World, name: str, model: type, invalid: Builder, valid: Builder
) -> None:
    instance = invalid(world)
    violated = violated_by(model, instance)
    assert name in violated

    with pytest.raises(IntegrityError) as refused, transaction.atomic():
        raw_insert(instance)

    # The database names the constraint it enforced (SQLite names CHECKs, not unique indexes).
    # An unknown scope also breaks grant_scope_matches_holder: either name will do.
    if connection.vendor == "postgresql" or isinstance(constraint(model, name), models.CheckConstraint):
        assert any(f"{broken}" in str(refused.value) for broken in violated), str(refused.value)


@pytest.mark.parametrize(("name", "model", "invalid", "valid"), CASES, ids=CASE_IDS)
def test_the_database_accepts_the_valid_twin(
    world: World, name: str, model: type, invalid: Builder, valid: Builder
) -> None:
    instance = valid(world)
    before = model.objects.count()
    with transaction.atomic():
        raw_insert(instance)
    assert model.objects.count() == before + 1


# --- Raw UPDATEs: a row already in the table cannot be turned invalid either --------------------


def raw_update(table: str, assignments: str, params: list[object], pk: object) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {assignments} WHERE id = %s", [*params, pk])


def db_time() -> object:
    return connection.ops.adapt_datetimefield_value(timezone.now())


def test_revoking_a_grant_without_a_reason_is_refused(world: World) -> None:  # S10
    grant = saved(world.session_grant())

    with pytest.raises(IntegrityError) as refused, transaction.atomic():
        raw_update("approvals_grant", "revoked_at = %s", [db_time()], grant.pk)
    assert "grant_revocation_has_reason" in str(refused.value)

    raw_update("approvals_grant", "revoked_at = %s, revoke_reason = %s", [db_time(), "CLEAR"], grant.pk)
    assert Grant.objects.active().count() == 0


def test_reviving_a_revoked_grant_beside_an_active_one_is_refused(world: World) -> None:  # one active per key
    old = saved(world.session_grant(revoked_at=timezone.now(), revoke_reason="SUPERSEDED"))
    saved(world.session_grant(decision="DENY"))

    with pytest.raises(IntegrityError), transaction.atomic():
        raw_update("approvals_grant", "revoked_at = NULL, revoke_reason = ''", [], old.pk)

    assert Grant.objects.active().count() == 1


def test_widening_an_abort_denial_to_agent_scope_is_refused(world: World) -> None:  # S9
    denial = saved(world.session_grant(origin="ABORT", decision="DENY"))

    with pytest.raises(IntegrityError), transaction.atomic():
        raw_update("approvals_grant", "scope = 'AGENT', session_id = NULL", [], denial.pk)
    with pytest.raises(IntegrityError), transaction.atomic():
        raw_update("approvals_grant", "decision = 'ALLOW'", [], denial.pk)

    denial.refresh_from_db()
    assert (denial.scope, denial.decision) == ("SESSION", "DENY")


def test_an_answered_item_cannot_be_set_to_ask(world: World) -> None:  # S7: only concrete answers
    answered = saved(world.item(decision="ALLOW", scope="SESSION"))

    with pytest.raises(IntegrityError), transaction.atomic():
        raw_update("approvals_approvalitem", "decision = 'ASK'", [], answered.pk)
