"""Audit coverage: every service that changes state writes its event (A1, A3).

The table below has an entry for every public function of every service module (found by
walking the package, so a new function without an entry fails
`test_every_service_function_has_an_entry`). Each entry says how to call it with real data
and which audit actions it must write, or why it writes none.

For each entry, on a fresh world built through the services themselves:

1. **A3, refused**: with a trigger that refuses every audit insert, the call must change
   nothing in the product's tables (no change without its event).
2. **A1, written**: called normally, if the product's tables changed then at least the
   expected events were written; each names the actor, the channel and the request id
   bound for the call, and no event holds any secret the world used (token plaintexts,
   passwords and their hashes, MCP URL credentials, env and header values).

Then the real entry points: a browser POST, an API call with a runtime token, a
management command and an eager Celery task each stamp their events with the right
channel and request id.
"""

from __future__ import annotations

import importlib
import inspect
import json
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

import aimon_admin
from aimon_admin.accounts import services as accounts
from aimon_admin.accounts.models import User
from aimon_admin.accounts.policy import ClaimedRoles
from aimon_admin.accounts.roles import Role
from aimon_admin.approvals import config as approvals_config
from aimon_admin.approvals import policy as approvals_policy
from aimon_admin.approvals import rules, tool_rules
from aimon_admin.approvals import services as approvals
from aimon_admin.approvals.choices import (
    Answer,
    GrantOrigin,
    GrantScope,
    RequestKind,
    RequestStatus,
    RuleAction,
)
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant, Session, SkillRule, ToolRule
from aimon_admin.approvals.services import answers as approvals_answers
from aimon_admin.approvals.services import chain_read as approvals_chain
from aimon_admin.approvals.services import escalation as approvals_escalation
from aimon_admin.approvals.services import grants as approvals_grants
from aimon_admin.approvals.services import item_answers as approvals_items
from aimon_admin.approvals.services import request_views, revocation
from aimon_admin.approvals.services import requests as approvals_requests
from aimon_admin.approvals.services import sessions as approvals_sessions
from aimon_admin.approvals.services import two_person as approvals_two_person
from aimon_admin.approvals.services.answers import user_may_answer
from aimon_admin.approvals.services.tool_decisions import call_approval_use, tool_call_evaluate
from aimon_admin.approvals.tasks import expire_due_requests
from aimon_admin.audit import chain, verification
from aimon_admin.audit import services as audit
from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditCheckpoint, AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.core.context import Channel, bound
from aimon_admin.core.middleware import REQUEST_ID_HEADER
from aimon_admin.notifications import config as notifications_config
from aimon_admin.notifications import services as notifications
from aimon_admin.notifications.choices import ChannelKind, DeliveryStatus, NotificationEvent
from aimon_admin.notifications.models import Channel as NotifyChannel
from aimon_admin.notifications.models import Delivery, Fanout
from aimon_admin.registry import config as registry_config
from aimon_admin.registry import services as registry
from aimon_admin.registry.choices import AnnotationTrust, McpTransport, ReviewFinding, SyncStatus
from aimon_admin.registry.models import McpServer, McpSyncRun, Tool
from aimon_admin.registry.sync import fetch, runs
from aimon_admin.runtimes import services as runtimes
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from tests.conftest import PASSWORD
from tests.ports import free_port
from tests.registry.mcp_servers import catalog
from tests.registry.mcp_servers.http import serve_http

# Every module whose public functions are services. Globs under aimon_admin/, so a new
# app's services.py (or services/ package) is walked without touching this file.
SERVICE_MODULE_GLOBS = (
    "*/services.py",
    "*/services/*.py",
    "approvals/rules.py",
    "approvals/tool_rules.py",
    "approvals/config.py",
    "notifications/config.py",
    "registry/config.py",
    "registry/sync/*.py",
    "audit/verification.py",
)
# The product's state: every table of these apps (audit excluded: it is what we check).
PRODUCT_APPS = ("accounts", "auth", "runtimes", "registry", "approvals", "notifications")

NEW_PASSWORD = "cov-new-pass phrase 7Kq!"
CREATED_PASSWORD = "cov-created-pass phrase 3Zx!"
URL_USER, URL_PASSWORD, URL_QUERY_SECRET = "covurluser", "cov-url-pass-5ecret", "cov-query-5ecret"
ENV_SECRET, NEW_ENV_SECRET = "cov-env-5ecret", "cov-env-5ecret-rotated"
HEADER_SECRET, CONFIG_HEADER_SECRET = "cov-header-5ecret", "cov-config-header-5ecret"
SECRET_URL = f"https://{URL_USER}:{URL_PASSWORD}@mcp.example.test/mcp?api_key={URL_QUERY_SECRET}"


# --- The world: real rows made through the services ---------------------------------------------


@dataclass
class World:
    operator: User
    approver: User
    auditor: User
    runtime: AgentRuntime
    token: RuntimeToken
    spare_token: RuntimeToken
    server: McpServer
    disabled_server: McpServer
    review_tool: Tool
    drifted_tool: Tool
    session_request: ApprovalRequest
    sessionless_request: ApprovalRequest
    cancel_request: ApprovalRequest
    due_request: ApprovalRequest
    session_grant: Grant
    agent_grant: Grant
    idle_session: Session
    rule: SkillRule
    secrets: list[str] = field(default_factory=list)
    stack: ExitStack = field(default_factory=ExitStack)
    prepared: Any = None

    @property
    def op(self) -> Actor:
        return Actor.for_user(self.operator)

    @property
    def as_runtime(self) -> Actor:
        return Actor.for_runtime(self.runtime)


def build_world() -> World:
    setup = Actor.system("coverage-setup")
    operator = accounts.user_create(username="olivia", password=PASSWORD, roles=[Role.OPERATOR], actor=setup)
    approver = accounts.user_create(username="alice", password=PASSWORD, roles=[Role.APPROVER], actor=setup)
    auditor = accounts.user_create(username="audrey", password=PASSWORD, roles=[Role.AUDITOR], actor=setup)
    op = Actor.for_user(operator)
    runtime = runtimes.runtime_create(name="cov-agent", owner=operator, actor=op)
    token, plaintext = runtimes.token_issue(runtime=runtime, actor=op, label="main")
    spare_token, spare_plaintext = runtimes.token_issue(runtime=runtime, actor=op, label="spare")
    registry.local_tools_replace(
        runtime=runtime,
        tools=[
            {"name": "Bash", "description": "Run a shell command"},
            {"name": "Read", "side_effect_level": "READ_ONLY"},
        ],
        actor=Actor.for_runtime(runtime),
    )
    server = registry.mcp_server_create(
        name="cov-srv",
        transport=McpTransport.STREAMABLE_HTTP,
        url=SECRET_URL,
        headers={"Authorization": f"Bearer {HEADER_SECRET}"},
        annotation_trust=AnnotationTrust.TRUST,
        actor=op,
    )
    disabled_server = registry.mcp_server_create(
        name="cov-off",
        transport=McpTransport.STDIO,
        command="cov-mcp",
        env={"API_TOKEN": ENV_SECRET},
        enabled=False,
        actor=op,
    )
    registry.mcp_tools_record(server=server, listing=catalog.listing("v1"), actor=op, complete=True)
    registry.mcp_tools_record(server=server, listing=catalog.listing("v2"), actor=op, complete=True)
    drifted_tool = Tool.objects.filter(server=server, awaiting_review=True).order_by("name").first()
    assert drifted_tool is not None, "catalog v2 has a tool that claims less risk"
    review_tool = Tool.objects.get(runtime=runtime, name="Bash")

    def open_request(skills: list[str], **fields: Any) -> ApprovalRequest:
        request, _ = approvals.request_create(
            approvals.RequestInput(runtime=runtime, skills=skills, **fields)
        )
        return request

    # Grants: a session one (alice's answer) and an agent-wide one (the operator's).
    answered = open_request(["deploy", "publish"], session_id="s-1", principal="alice")
    approvals.request_answer(request=answered, user=approver, answer=Answer.ALLOW_SESSION, skills=["deploy"])
    approvals.request_answer(request=answered, user=operator, answer=Answer.ALLOW_AGENT, skills=["publish"])
    session_grant = Grant.objects.get(skill="deploy", scope=GrantScope.SESSION, revoked_at=None)
    agent_grant = Grant.objects.get(skill="publish", scope=GrantScope.AGENT, revoked_at=None)
    session_request = open_request(["migrate", "backup"], session_id="s-1", principal="alice")
    sessionless_request = open_request(["rotate-keys"])
    cancel_request = open_request(["drop-table"], session_id="s-1", principal="alice")
    due_request = open_request(["restart"], session_id="s-1", principal="alice")
    ApprovalRequest.objects.filter(pk=due_request.pk).update(expires_at=timezone.now() - timedelta(seconds=5))
    due_request.refresh_from_db()
    # A session idle past its TTL, still holding a grant (S12).
    idle_request = open_request(["lint"], session_id="s-idle", principal="alice")
    approvals.request_answer(request=idle_request, user=approver, answer=Answer.ALLOW_SESSION)
    idle_session = Session.objects.get(runtime=runtime, session_id="s-idle")
    Session.objects.filter(pk=idle_session.pk).update(
        last_seen_at=timezone.now() - approvals_sessions.session_idle_ttl() - timedelta(minutes=5)
    )
    rule = rules.rule_create(pattern="deploy-*", action=RuleAction.ASK, actor=op)

    world = World(
        operator=operator,
        approver=approver,
        auditor=auditor,
        runtime=runtime,
        token=token,
        spare_token=spare_token,
        server=server,
        disabled_server=disabled_server,
        review_tool=review_tool,
        drifted_tool=drifted_tool,
        session_request=session_request,
        sessionless_request=sessionless_request,
        cancel_request=cancel_request,
        due_request=due_request,
        session_grant=session_grant,
        agent_grant=agent_grant,
        idle_session=idle_session,
        rule=rule,
    )
    world.secrets += [
        PASSWORD,
        NEW_PASSWORD,
        CREATED_PASSWORD,
        plaintext,
        spare_plaintext,
        URL_PASSWORD,
        f"{URL_USER}:",
        URL_QUERY_SECRET,
        ENV_SECRET,
        NEW_ENV_SECRET,
        HEADER_SECRET,
        CONFIG_HEADER_SECRET,
    ]
    return world


# --- The table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """How to call one service, and what it must leave in the audit log.

    `expect`: the actions it must write (at least these) when it changes state.
    `actor`: the actor those events must name (None: checked by `check` instead).
    `reads`: why it writes no event because it changes nothing (asserted).
    `no_event`: why it may change state without an event (reviewed, by design).
    `bookkeeping`: tables it may change before its audited write, with the reason.
    `changes`: False for services whose only write is the event itself.
    """

    run: Callable[[World], Any]
    expect: tuple[AuditAction, ...] = ()
    actor: Callable[[World], Actor] | None = None
    reads: str = ""
    no_event: str = ""
    bookkeeping: dict[str, str] = field(default_factory=dict)
    changes: bool = True
    prepare: Callable[[World], Any] | None = None
    check: Callable[[World, list[AuditEvent]], None] | None = None
    channel: str = Channel.BROWSER


def _op(w: World) -> Actor:
    return w.op


def _rt(w: World) -> Actor:
    return w.as_runtime


PURE = "a pure function: no database at all"


def _remember_token(w: World, result: tuple[RuntimeToken, str]) -> tuple[RuntimeToken, str]:
    w.secrets.append(result[1])
    return result


def _remember_link(w: World, result: tuple[str, str]) -> tuple[str, str]:
    w.secrets.append(result[1])  # the set-password token: never in an event
    return result


def _check_trust_per_tool(w: World, events: list[AuditEvent]) -> None:
    (event,) = [e for e in events if e.action == AuditAction.MCP_TRUST_CHANGED]
    tools = event.details["tools"]
    assert tools, "a trust change records each tool it re-resolved"
    assert all(set(item) == {"tool", "before", "after"} and item["before"] != item["after"] for item in tools)
    assert (event.details["before"], event.details["after"]) == ("TRUST", "IGNORE")


def _check_counts(key: str, expected: Callable[[World], int]) -> Callable[[World, list[AuditEvent]], None]:
    def check(w: World, events: list[AuditEvent]) -> None:
        assert any(e.details.get(key) == expected(w) for e in events), f"{key} must count what was removed"

    return check


def _check_escalation(w: World, events: list[AuditEvent]) -> None:
    (event,) = [e for e in events if e.action == AuditAction.SKILL_GRANT_ESCALATED]
    assert event.level == AuditLevel.WARNING  # S6
    assert event.details["all_sessions"] is True
    assert event.details["survives_clear"] is True
    assert event.details["answered_by"] == w.operator.username


def _check_registration(w: World, events: list[AuditEvent]) -> None:
    (event,) = [e for e in events if e.action == AuditAction.MCP_TOOLS_REGISTERED]
    for item in event.details["registered"]:
        assert set(item["axes"]) == {"side_effect_level", "destructive_behavior", "idempotency_behavior"}


def _serve_catalog(w: World) -> str:
    url = w.stack.enter_context(serve_http(catalog.build_server()))
    server = registry.mcp_server_create(
        name="cov-live",
        transport=McpTransport.STREAMABLE_HTTP,
        url=url,
        headers={"X-Api-Key": HEADER_SECRET},
        annotation_trust=AnnotationTrust.TRUST,
        actor=w.op,
    )
    w.prepared = server
    return url


def _tool_rule(w: World) -> None:
    registry.tool_subject_set(server=None, tool="Bash", argument="command", actor=w.op)
    w.prepared = rules.tool_rule_create(text="Bash(make:*)", action=RuleAction.ASK, actor=w.op)


def _tool_request(w: World) -> ApprovalRequest:
    """A pending request about one Bash call of session s-1 (U2), its subject the command."""
    registry.tool_subject_set(server=None, tool="Bash", argument="command", actor=w.op)
    request, _ = approvals.request_create(
        approvals.RequestInput(
            runtime=w.runtime,
            skills=[],
            kind=RequestKind.TOOL,
            tool="Bash",
            arguments={"command": "make deploy"},
            session_id="s-1",
            principal="alice",
        )
    )
    return request


def _pending_tool_request(w: World) -> None:
    w.prepared = _tool_request(w)


def _needs_two_people(w: World) -> None:
    """P3: the session request's skills need two people to allow, as a rule asked when it opened."""
    ApprovalItem.objects.filter(request=w.session_request).update(approvers=2)


def _call_approved(w: World) -> None:
    """A tool request answered Allow this call (U4): its id, for a decision to present."""
    request = _tool_request(w)
    approvals.request_answer(request=request, user=w.approver, answer=Answer.ALLOW_CALL)
    w.prepared = request.pk


def _call_approved_and_token(w: World) -> None:
    """An Allow this call's request id, and a token's plaintext to present it with."""
    _call_approved(w)
    approval_id = w.prepared
    _fresh_token(w)
    w.prepared = (w.prepared, approval_id)


def _relay_finding(w: World) -> None:
    """An open relay finding: a runtime relayed a known tool with another description (T15)."""
    result = registry.mcp_tools_relay(
        server=w.server, runtime=w.runtime, listing=[{"name": "lookup_record", "description": "relayed"}]
    )
    w.prepared = result.findings[0]


def _queued_run(w: World) -> None:
    _serve_catalog(w)
    w.prepared = McpSyncRun.objects.create(server=w.prepared, progress="Queued")


def _fresh_token(w: World) -> None:
    """A runtime token's plaintext, for the services that authenticate one themselves."""
    _, plaintext = runtimes.token_issue(runtime=w.runtime, actor=w.op, label="fused")
    w.secrets.append(plaintext)
    w.prepared = plaintext


def _stale_run(w: World) -> None:
    w.prepared = McpSyncRun.objects.create(
        server=w.server,
        status=SyncStatus.RUNNING,
        attempts=1,
        started_at=timezone.now() - runs.STALE_AFTER - timedelta(minutes=1),
    )


CONFIG_YAML = f"""\
mcpServers:
  cov-srv:
    url: https://mcp.example.test/mcp
    annotationTrust: IGNORE
  cov-new:
    url: https://new.example.test/mcp
    headers: {{Authorization: "Bearer {CONFIG_HEADER_SECRET}"}}
"""


# load_config's rule sections (approvals/config.py).
RULES_YAML = """\
toolSubjects: {Bash: command}
toolRules:
  - {pattern: "Bash(rm:*)", action: DENY}
  - {pattern: "Bash(make nightly)", action: ALLOW, runtime: cov-agent, unattended: true}
skillRules:
  - {pattern: "cov-*", action: ASK, widestScope: SESSION}
"""


def _config_file(w: World) -> None:
    handle = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)  # noqa: SIM115
    with handle:
        handle.write(CONFIG_YAML)
    w.stack.callback(Path(handle.name).unlink, missing_ok=True)
    w.prepared = handle.name


def _export_file(w: World) -> None:
    handle = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)  # noqa: SIM115
    with handle:
        handle.write("")
    w.stack.callback(Path(handle.name).unlink, missing_ok=True)
    w.prepared = handle.name


def _item_answer(w: World) -> ApprovalItem | None:
    """One item's answer written as request_answer writes it: inside the answer's transaction,
    which the request's close joins (S7)."""
    request = w.session_request
    with transaction.atomic():
        return approvals_items.item_answer(
            request=request,
            item=request.items.get(skill="migrate"),
            answer=Answer.ALLOW_SESSION,
            shape=approvals_requests.request_shape(request),
            user=w.approver,
            notes=[],
        )


def _item_allow(w: World) -> ApprovalItem | None:
    """P3: the operator's allow of an item that needs two people (recorded, no grant yet)."""
    request = w.session_request
    return approvals_two_person.item_allow(
        request=request,
        item=request.items.get(skill="migrate"),
        answer=Answer.ALLOW_SESSION,
        shape=approvals_requests.request_shape(request),
        user=w.operator,
        outcome=approvals.AnswerOutcome(),
        pattern="",
    )


def _grant_write(w: World) -> approvals_grants.GrantWrite:
    request = w.session_request
    return approvals_grants.grant_write(
        request=request,
        skill="migrate",
        target=approvals_policy.grant_for_answer(
            Answer.ALLOW_SESSION, approvals_requests.request_shape(request)
        ),
        origin=GrantOrigin.ANSWER,
        user=w.approver,
        now=timezone.now(),
    )


def _answer(
    w: World, request: ApprovalRequest, user: User, answer: Answer, pattern: str | None = None
) -> approvals.AnswerOutcome:
    outcome = approvals.request_answer(request=request, user=user, answer=answer, pattern=pattern)
    if outcome.failed:
        # S8: a failed write is reported per skill, not raised; surface it for the A3 check.
        raise RuntimeError("; ".join(message for _, message in outcome.failed))
    return outcome


# --- notifications --------------------------------------------------------------------------------

CHAT_TOKEN = "TIiajkdnlazkcOXrIdevi7FQ"  # the secret part of a chat channel's URL
CHAT_URL = f"slack://T1JJ3T3L2/A1BRTD4JD/{CHAT_TOKEN}/"
SEND_CLAIM = (
    "the claim (SENDING, its token and lease) commits before the send, so no second worker "
    "sends it; the outcome commits with its event"
)


def _remember_secret(w: World, result: tuple[Any, str]) -> tuple[Any, str]:
    w.secrets.append(result[1])  # a webhook's signing secret: never in an event
    return result


def _alice_channel(w: World) -> None:
    w.prepared = notifications.channel_add(
        owner=w.approver, kind=ChannelKind.EMAIL, name="work", target="alice@example.test",
        actor=Actor.for_user(w.approver),
    )  # fmt: skip


def _webhook(w: World) -> None:
    hook, _ = _remember_secret(
        w, notifications.webhook_create(name="siem", url="http://127.0.0.1:9/hook", actor=w.op)
    )
    w.prepared = hook


def _unannounced_request(w: World) -> None:
    """Alice's channel, and her pending request as if its fan-out never ran (the queue was down)."""
    _alice_channel(w)
    Fanout.objects.filter(request=w.session_request, event=NotificationEvent.REQUESTED).update(
        fanned_out_at=None
    )


def _due_delivery(w: World) -> None:
    _alice_channel(w)
    w.prepared = Delivery.objects.create(
        request=w.session_request, channel=w.prepared, event=NotificationEvent.REQUESTED,
        next_attempt_at=timezone.now(),
    )  # fmt: skip


def _held_delivery(w: World) -> None:
    _due_delivery(w)
    Delivery.objects.filter(pk=w.prepared.pk).update(status=DeliveryStatus.HELD, batched=True)


def _closed_request(w: World) -> None:
    """A request the runtime has not yet been sent closed (its status set directly: what
    closed it is not what this case is about)."""
    ApprovalRequest.objects.filter(pk=w.session_request.pk).update(
        status=RequestStatus.CANCELLED, closed_at=timezone.now()
    )
    w.session_request = ApprovalRequest.objects.get(pk=w.session_request.pk)


def _overdue_request(w: World) -> None:
    """P2: the runtime sends a request unanswered for a minute to the operators; Alice's has
    waited two."""
    AgentRuntime.objects.filter(pk=w.runtime.pk).update(escalate_after_seconds=60)
    ApprovalRequest.objects.filter(pk=w.session_request.pk).update(
        created_at=timezone.now() - timedelta(minutes=2)
    )
    w.session_request = ApprovalRequest.objects.get(pk=w.session_request.pk)


WEBHOOK_SECRET_GIVEN = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # nosec B105 - a test's own
# load_config's webhooks (notifications/config.py): one with its secret given, one made.
WEBHOOKS_YAML = f"""\
webhooks:
  siem: {{url: "http://127.0.0.1:9/hook", secret: {WEBHOOK_SECRET_GIVEN}}}
  chat: {{url: "http://127.0.0.1:9/chat", events: [approval.escalated]}}
"""


def _load_webhooks(w: World) -> Any:
    w.secrets.append(WEBHOOK_SECRET_GIVEN)
    loaded = notifications_config.config_apply(
        notifications_config.config_parse(WEBHOOKS_YAML, filename="hooks.yaml"), actor=w.op
    )
    w.secrets.extend(loaded.new_secrets.values())
    return loaded


def _queued_delivery(w: World) -> None:
    _due_delivery(w)
    Delivery.objects.filter(pk=w.prepared.pk).update(lease_until=timezone.now() + timedelta(minutes=5))


def _lapsed_delivery(w: World) -> None:
    _due_delivery(w)
    Delivery.objects.filter(pk=w.prepared.pk).update(
        status=DeliveryStatus.SENDING, lease_until=timezone.now() - timedelta(seconds=1)
    )


def _failing_delivery(
    *, attempts: int | Callable[[], int], failures: int | Callable[[], int]
) -> Callable[[World], None]:
    """A webhook whose receiver is down, and a delivery due to it: `attempts` already made,
    the channel `failures` in a row already."""

    def prepare(w: World) -> None:
        hook, _ = _remember_secret(
            w,
            notifications.webhook_create(name="down", url=f"http://127.0.0.1:{free_port()}/hook", actor=w.op),
        )
        NotifyChannel.objects.filter(pk=hook.pk).update(
            consecutive_failures=failures() if callable(failures) else failures
        )
        w.prepared = Delivery.objects.create(
            request=w.session_request, channel=hook, event=NotificationEvent.REQUESTED,
            next_attempt_at=timezone.now(), attempts=attempts() if callable(attempts) else attempts,
        )  # fmt: skip

    return prepare


def _witnessed_checkpoint(*, owed: bool) -> Callable[[World], None]:
    """A webhook that takes signed checkpoints (A4), and a checkpoint (its row written
    directly: what it owes is the case), `owed` its fan-out or not yet."""

    def prepare(w: World) -> None:
        _remember_secret(
            w,
            notifications.webhook_create(
                name="witness",
                url="http://127.0.0.1:9/hook",
                events=[NotificationEvent.CHECKPOINT],
                actor=w.op,
            ),
        )
        w.prepared = AuditCheckpoint.objects.create(
            tree_size=1,
            root_hash="0" * 64,
            signed_at=timezone.now(),
            key_id="k",
            checkpoint_hash="1" * 64,
            document={"tree_size": 1},
        )
        if owed:
            Fanout.objects.create(checkpoint=w.prepared, event=NotificationEvent.CHECKPOINT)

    return prepare


def _send_again(w: World) -> Any:
    """Send the prepared delivery, due again first (as the sweep hands back a lapsed claim:
    the A3 check's refused run left it claimed)."""
    Delivery.objects.filter(pk=w.prepared.pk).update(status=DeliveryStatus.PENDING, claim=None)
    return notifications.delivery_send(delivery_id=w.prepared.pk)


CASES: dict[str, list[Case]] = {
    # accounts
    "aimon_admin.accounts.services.role_groups_sync": [
        Case(
            run=lambda w: accounts.role_groups_sync(),
            no_event=(
                "installs each role's group and permissions from ROLE_PERMISSIONS after every "
                "migrate: the code is the record, and no person's roles change"
            ),
        )
    ],
    "aimon_admin.accounts.services.user_create": [
        Case(
            run=lambda w: accounts.user_create(
                username="carol", password=CREATED_PASSWORD, roles=[Role.APPROVER], actor=w.op
            ),
            expect=(AuditAction.USER_CREATED,),
            actor=_op,
        )
    ],
    "aimon_admin.accounts.services.user_set_roles": [
        Case(
            run=lambda w: accounts.user_set_roles(
                user=w.approver, roles=[Role.APPROVER, Role.AUDITOR], actor=w.op
            ),
            expect=(AuditAction.USER_ROLES_CHANGED,),
            actor=_op,
        )
    ],
    "aimon_admin.accounts.services.user_set_password": [
        Case(
            run=lambda w: accounts.user_set_password(user=w.approver, password=NEW_PASSWORD, actor=w.op),
            expect=(AuditAction.USER_PASSWORD_CHANGED,),
            actor=_op,
        )
    ],
    "aimon_admin.accounts.services.login_record": [
        Case(
            run=lambda w: accounts.login_record(user=w.approver),
            expect=(AuditAction.LOGIN_SUCCEEDED,),
            actor=lambda w: Actor.for_user(w.approver),
        )
    ],
    "aimon_admin.accounts.services.login_failure_record": [
        Case(
            run=lambda w: accounts.login_failure_record(username="alice"),
            expect=(AuditAction.LOGIN_FAILED,),
            actor=lambda w: Actor.system("anonymous"),
            changes=False,
        )
    ],
    "aimon_admin.accounts.services.login_lockout_record": [
        Case(
            run=lambda w: accounts.login_lockout_record(username="alice", ip_address="10.0.0.9", failures=5),
            expect=(AuditAction.LOGIN_LOCKED_OUT,),
            actor=lambda w: Actor.system("anonymous"),
            changes=False,
        )
    ],
    "aimon_admin.accounts.services.login_unlock": [
        Case(
            run=lambda w: accounts.login_unlock(username="alice", actor=Actor.for_user(w.operator)),
            expect=(AuditAction.LOGIN_UNLOCKED,),
            actor=lambda w: Actor.for_user(w.operator),
            changes=False,
        )
    ],
    "aimon_admin.accounts.services.user_deactivate": [
        Case(
            run=lambda w: accounts.user_deactivate(user=w.approver, actor=w.op),
            expect=(AuditAction.USER_DEACTIVATED,),
            actor=_op,
        )
    ],
    "aimon_admin.accounts.services.user_reactivate": [
        Case(
            run=lambda w: accounts.user_reactivate(user=w.approver, actor=w.op),
            expect=(AuditAction.USER_REACTIVATED,),
            actor=_op,
            prepare=lambda w: accounts.user_deactivate(user=w.approver, actor=w.op),
        )
    ],
    "aimon_admin.accounts.services.user_password_link": [
        Case(
            run=lambda w: _remember_link(w, accounts.user_password_link(user=w.approver, actor=w.op)),
            expect=(AuditAction.USER_PASSWORD_LINK_ISSUED,),
            actor=_op,
            changes=False,
        )
    ],
    "aimon_admin.accounts.services.oidc_person_sign_in": [
        # First seen: created, with the roles the claims give.
        Case(
            run=lambda w: accounts.oidc_person_sign_in(
                issuer="https://idp.example.test",
                subject="cov-sub-1",
                username="cov-oidc",
                email="",
                claimed=ClaimedRoles(roles=(Role.AUDITOR,)),
                provider="the provider",
            ),
            expect=(AuditAction.USER_CREATED,),
            actor=lambda w: Actor.system(accounts.OIDC_ACTOR_LABEL),
        ),
        # Seen before: the roles of this sign-in's claims.
        Case(
            prepare=lambda w: accounts.oidc_person_sign_in(
                issuer="https://idp.example.test",
                subject="cov-sub-2",
                username="cov-oidc-2",
                email="",
                claimed=ClaimedRoles(roles=(Role.APPROVER,)),
                provider="the provider",
            ),
            run=lambda w: accounts.oidc_person_sign_in(
                issuer="https://idp.example.test",
                subject="cov-sub-2",
                username="cov-oidc-2",
                email="",
                claimed=ClaimedRoles(roles=(Role.AUDITOR,)),
                provider="the provider",
            ),
            expect=(AuditAction.USER_ROLES_CHANGED,),
            actor=lambda w: Actor.system(accounts.OIDC_ACTOR_LABEL),
        ),
    ],
    "aimon_admin.accounts.services.logout_record": [
        Case(
            run=lambda w: accounts.logout_record(user=w.approver),
            expect=(AuditAction.LOGOUT,),
            actor=lambda w: Actor.for_user(w.approver),
            changes=False,
        )
    ],
    # runtimes
    "aimon_admin.runtimes.services.runtime_create": [
        Case(
            run=lambda w: runtimes.runtime_create(name="cov-new-agent", actor=w.op),
            expect=(AuditAction.RUNTIME_CREATED,),
            actor=_op,
        )
    ],
    "aimon_admin.runtimes.services.runtime_update_settings": [
        Case(
            run=lambda w: runtimes.runtime_update_settings(
                runtime=w.runtime,
                ceiling="READ_ONLY",
                exempt_at_or_below="READ_ONLY",
                owner=None,
                description="read only now",
                actor=w.op,
            ),
            expect=(AuditAction.RUNTIME_SETTINGS_CHANGED,),
            actor=_op,
        )
    ],
    "aimon_admin.runtimes.services.token_issue": [
        Case(
            run=lambda w: _remember_token(
                w, runtimes.token_issue(runtime=w.runtime, actor=w.op, label="new")
            ),
            expect=(AuditAction.TOKEN_ISSUED,),
            actor=_op,
        )
    ],
    "aimon_admin.runtimes.services.token_revoke": [
        Case(
            run=lambda w: runtimes.token_revoke(token=w.spare_token, actor=w.op),
            expect=(AuditAction.TOKEN_REVOKED,),
            actor=_op,
        )
    ],
    "aimon_admin.runtimes.services.runtime_disable": [
        Case(
            run=lambda w: runtimes.runtime_disable(runtime=w.runtime, actor=w.op),
            expect=(AuditAction.RUNTIME_DISABLED,),
            actor=_op,
        )
    ],
    "aimon_admin.runtimes.services.runtime_enable": [
        Case(
            run=lambda w: runtimes.runtime_enable(runtime=w.runtime, actor=w.op),
            expect=(AuditAction.RUNTIME_ENABLED,),
            actor=_op,
            prepare=lambda w: runtimes.runtime_disable(runtime=w.runtime, actor=w.op),
        )
    ],
    "aimon_admin.runtimes.services.runtime_retire": [
        Case(
            run=lambda w: runtimes.runtime_retire(runtime=w.runtime, actor=w.op),
            expect=(AuditAction.RUNTIME_RETIRED,),
            actor=_op,
        )
    ],
    # registry
    "aimon_admin.registry.services.catalog.local_tools_replace": [
        Case(
            run=lambda w: registry.local_tools_replace(
                runtime=w.runtime,
                tools=[{"name": "Write", "side_effect_level": "MUTATING"}],
                actor=w.as_runtime,
            ),
            expect=(AuditAction.LOCAL_TOOLS_REPLACED,),
            actor=_rt,
            channel=Channel.API,
        )
    ],
    "aimon_admin.registry.services.listings.mcp_tools_record": [
        Case(
            run=lambda w: registry.mcp_tools_record(
                server=w.server,
                listing=[{"name": "brand_new", "annotations": {"readOnlyHint": True}}],
                actor=w.op,
                complete=True,
            ),
            expect=(AuditAction.MCP_TOOLS_REGISTERED,),
            actor=_op,
            check=_check_registration,
        )
    ],
    "aimon_admin.registry.services.listings.mcp_tools_relay": [
        Case(
            run=lambda w: registry.mcp_tools_relay(
                server=w.server,
                runtime=w.runtime,
                listing=[
                    {"name": "relayed_new", "annotations": {"readOnlyHint": True}},
                    {"name": "lookup_record", "description": "changed by a relay"},
                ],
            ),
            expect=(
                AuditAction.MCP_TOOLS_RELAYED,
                AuditAction.RELAY_FINDING_RECORDED,  # T15: a relay changes no tool, adds none
            ),
            actor=_rt,
            channel=Channel.API,
        )
    ],
    "aimon_admin.registry.services.servers.mcp_server_create": [
        Case(
            run=lambda w: registry.mcp_server_create(
                name="cov-created",
                transport=McpTransport.STREAMABLE_HTTP,
                url=SECRET_URL,
                headers={"Authorization": HEADER_SECRET},
                actor=w.op,
            ),
            expect=(AuditAction.MCP_SERVER_CREATED,),
            actor=_op,
        )
    ],
    "aimon_admin.registry.services.servers.mcp_server_update": [
        Case(
            run=lambda w: registry.mcp_server_update(
                server=w.disabled_server, env={"API_TOKEN": NEW_ENV_SECRET}, timeout_seconds=45, actor=w.op
            ),
            expect=(AuditAction.MCP_SERVER_CHANGED,),
            actor=_op,
        )
    ],
    "aimon_admin.registry.services.servers.trust_change_preview": [
        Case(
            run=lambda w: registry.trust_change_preview(server=w.server, trust=AnnotationTrust.IGNORE),
            reads="a preview: resolves in memory and saves nothing",
        )
    ],
    "aimon_admin.registry.services.servers.mcp_server_retire": [
        Case(
            run=lambda w: registry.mcp_server_retire(server=w.server, actor=w.op),
            expect=(AuditAction.MCP_SERVER_RETIRED,),
            actor=_op,
        )
    ],
    "aimon_admin.registry.services.servers.mcp_server_set_trust": [
        Case(
            run=lambda w: registry.mcp_server_set_trust(
                server=w.server, trust=AnnotationTrust.IGNORE, actor=w.op
            ),
            expect=(AuditAction.MCP_TRUST_CHANGED,),
            actor=_op,
            check=_check_trust_per_tool,
        )
    ],
    "aimon_admin.registry.services.servers.mcp_sync_request": [
        # The eager task runs once the request commits; the server is disabled, so it fails
        # at once, as the background task (its own channel, checked in check_event).
        Case(
            run=lambda w: registry.mcp_sync_request(server=w.disabled_server, actor=w.op),
            expect=(AuditAction.MCP_SYNC_REQUESTED, AuditAction.MCP_SYNC_FAILED),
            actor=_op,
        )
    ],
    "aimon_admin.registry.services.reviews.tool_accept_definition": [
        Case(
            run=lambda w: registry.tool_accept_definition(tool=w.drifted_tool, actor=w.op),
            expect=(AuditAction.TOOL_DEFINITION_ACCEPTED,),
            actor=_op,
        )
    ],
    "aimon_admin.registry.services.subjects.tool_subject_set": [
        Case(
            run=lambda w: registry.tool_subject_set(server="", tool="Bash", argument="command", actor=w.op),
            expect=(AuditAction.TOOL_SUBJECT_SET,),
            actor=_op,
        )
    ],
    "aimon_admin.registry.services.reviews.relay_finding_accept": [
        Case(
            prepare=_relay_finding,
            run=lambda w: registry.relay_finding_accept(finding=w.prepared, actor=w.op),
            expect=(AuditAction.RELAY_FINDING_ACCEPTED,),
            actor=_op,
        )
    ],
    "aimon_admin.registry.services.reviews.relay_finding_dismiss": [
        Case(
            prepare=_relay_finding,
            run=lambda w: registry.relay_finding_dismiss(finding=w.prepared, actor=w.op),
            expect=(AuditAction.RELAY_FINDING_DISMISSED,),
            actor=_op,
        )
    ],
    "aimon_admin.registry.services.reviews.tool_record_review": [
        Case(
            run=lambda w: registry.tool_record_review(
                tool=w.review_tool, finding=ReviewFinding.CONFIRMED_DESTRUCTIVE, note="rm -rf", actor=w.op
            ),
            expect=(AuditAction.TOOL_REVIEW_RECORDED,),
            actor=_op,
        )
    ],
    "aimon_admin.registry.config.config_read": [
        Case(
            prepare=_config_file,
            run=lambda w: registry_config.config_read(w.prepared),
            reads="reads and checks a file; config_apply writes",
        )
    ],
    "aimon_admin.registry.config.config_parse": [
        Case(run=lambda w: registry_config.config_parse(CONFIG_YAML, filename="c.yaml"), reads=PURE)
    ],
    "aimon_admin.registry.config.config_apply": [
        Case(
            run=lambda w: registry_config.config_apply(
                registry_config.config_parse(CONFIG_YAML, filename="servers.yaml"), actor=w.op
            ),
            expect=(
                AuditAction.CONFIG_LOADED,
                AuditAction.MCP_SERVER_CREATED,
                AuditAction.MCP_SERVER_CHANGED,
                AuditAction.MCP_TRUST_CHANGED,
            ),
            actor=_op,
            channel=Channel.CLI,
        )
    ],
    "aimon_admin.registry.sync.fetch.one_line": [Case(run=lambda w: fetch.one_line("a\nb"), reads=PURE)],
    "aimon_admin.registry.sync.fetch.fetch_tool_listing": [
        Case(
            prepare=_serve_catalog,
            run=lambda w: fetch.fetch_tool_listing(w.prepared),
            reads="talks to the MCP server only; run_sync stores what it returns",
        )
    ],
    "aimon_admin.registry.sync.runs.run_sync": [
        Case(
            prepare=_queued_run,
            run=lambda w: runs.run_sync(w.prepared.pk),
            expect=(AuditAction.MCP_SYNC_SUCCEEDED, AuditAction.MCP_TOOLS_REGISTERED),
            actor=lambda w: runs.SYNC_ACTOR,
            bookkeeping={
                "registry_mcpsyncrun": (
                    "the claim (RUNNING, attempts, progress) commits before the fetch so a "
                    "redelivered task is fenced; the listing and outcome commit with their event"
                )
            },
            check=_check_registration,
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.registry.sync.runs.sync_run_fail_unqueued": [
        Case(
            prepare=_queued_run,
            run=lambda w: runs.sync_run_fail_unqueued(w.prepared.pk, "Error 111 connecting to redis"),
            expect=(AuditAction.MCP_SYNC_FAILED,),
            actor=lambda w: runs.SYNC_ACTOR,
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.registry.sync.runs.run_trouble": [
        Case(run=lambda w: runs.run_trouble(None, now=timezone.now()), reads=PURE)
    ],
    "aimon_admin.registry.sync.runs.sync_runs_fail_stale": [
        Case(
            prepare=_stale_run,
            run=lambda w: runs.sync_runs_fail_stale(),
            expect=(AuditAction.MCP_SYNC_FAILED,),
            actor=lambda w: runs.SYNC_ACTOR,
            channel=Channel.TASK,
        )
    ],
    # approvals
    "aimon_admin.approvals.services.sessions.session_idle_ttl": [
        Case(run=lambda w: approvals_sessions.session_idle_ttl(), reads=PURE)
    ],
    "aimon_admin.approvals.services.sessions.session_touch": [
        Case(
            run=lambda w: approvals_sessions.session_touch(
                runtime=w.runtime, session_id="s-idle", principal="alice"
            ),
            expect=(AuditAction.SESSION_EXPIRED,),
            actor=lambda w: Actor.system("session-ttl"),
            check=_check_counts("removed", lambda w: 1),
            channel=Channel.API,
        ),
        Case(
            run=lambda w: approvals_sessions.session_touch(
                runtime=w.runtime, session_id="s-new", principal="alice"
            ),
            no_event=(
                "first sight of a session: a runtime naming a session grants nothing; the row "
                "(runtime, id, principal, first_seen_at) is its own record (S12)"
            ),
            channel=Channel.API,
        ),
    ],
    "aimon_admin.approvals.services.chain_read.chain_read": [
        Case(
            run=lambda w: approvals_chain.chain_read(["s-1"], skills=["deploy"], runtime_pk=w.runtime.pk),
            reads="the chain's one read (S2): a SELECT",
        )
    ],
    "aimon_admin.approvals.services.chain_read.grant_layer": [
        Case(
            run=lambda w: approvals_chain.grant_layer(
                approvals_chain.GrantRow(1, None, 1, GrantScope.AGENT, "", "ALLOW", "", "deploy"),
                1,
                None,
                None,
            ),
            reads=PURE,
        )
    ],
    "aimon_admin.approvals.services.chain_read.sessions_find": [
        Case(
            run=lambda w: approvals_chain.sessions_find(
                w.runtime, approvals.SkillCall(skills=[], session_id="s-idle")
            ),
            expect=(AuditAction.SESSION_EXPIRED,),
            actor=lambda w: Actor.system("session-ttl"),
            channel=Channel.API,
        )
    ],
    "aimon_admin.approvals.services.decisions.decide_skills": [
        Case(
            run=lambda w: approvals.decide_skills(
                w.runtime,
                approvals.SkillCall(
                    skills=["deploy"],
                    session_id="s-idle",
                    invoking_session_id=None,
                    principal=None,
                    turn_id=None,
                ),
            ),
            expect=(AuditAction.SESSION_EXPIRED,),
            actor=lambda w: Actor.system("session-ttl"),
            channel=Channel.API,
        )
    ],
    "aimon_admin.approvals.services.chain_read.decide_for_token": [
        Case(
            prepare=_fresh_token,
            run=lambda w: approvals.decide_for_token(
                w.prepared,
                approvals.SkillCall(
                    skills=["deploy"],
                    session_id="s-idle",
                    invoking_session_id=None,
                    principal=None,
                    turn_id=None,
                ),
                approvals.decide_skills,
            ),
            expect=(AuditAction.SESSION_EXPIRED,),
            actor=lambda w: Actor.system("session-ttl"),
            bookkeeping={
                "runtimes_runtimetoken": (
                    "last_used_at, written as every authentication writes it (at most once a "
                    "minute), before the decision"
                )
            },
            channel=Channel.API,
        ),
        Case(
            prepare=_call_approved_and_token,
            run=lambda w: approvals.decide_for_token(
                w.prepared[0],
                approvals.ToolCall(
                    tool="Bash",
                    session_id="s-1",
                    arguments={"command": "make deploy"},
                    approval_id=w.prepared[1],
                ),
                approvals.tool_call_decide,
            ),
            expect=(AuditAction.TOOL_CALL_APPROVAL_USED,),
            actor=_rt,
            bookkeeping={
                "runtimes_runtimetoken": (
                    "last_used_at, written as every authentication writes it (at most once a "
                    "minute), before the decision"
                )
            },
            channel=Channel.API,
        ),
    ],
    "aimon_admin.approvals.services.tool_decisions.tool_call_decide": [
        Case(
            prepare=_call_approved,
            run=lambda w: approvals.tool_call_decide(
                w.runtime,
                approvals.ToolCall(
                    tool="Bash",
                    session_id="s-1",
                    arguments={"command": "make deploy"},
                    approval_id=w.prepared,
                ),
            ),
            expect=(AuditAction.TOOL_CALL_APPROVAL_USED,),
            actor=_rt,
            channel=Channel.API,
        )
    ],
    "aimon_admin.approvals.services.tool_decisions.tool_call_evaluate": [
        Case(
            run=lambda w: tool_call_evaluate(
                runtime=w.runtime,
                tool="Bash",
                server=None,
                session=Session.objects.get(session_id="s-1"),
                invoking_session=None,
                turn_id=None,
                arguments={"command": "ls"},
            ),
            reads="a decision (U) reads the chain and writes nothing",
        )
    ],
    "aimon_admin.approvals.services.tool_decisions.call_approval_use": [
        Case(
            prepare=_call_approved,
            run=lambda w: call_approval_use(
                w.runtime,
                approvals.ToolCall(tool="Bash", approval_id=w.prepared),
                ApprovalRequest.objects.get(pk=w.prepared).arguments_digest,
                Session.objects.get(session_id="s-1").pk,
                None,
            ),
            expect=(AuditAction.TOOL_CALL_APPROVAL_USED,),
            actor=_rt,
            channel=Channel.API,
        )
    ],
    "aimon_admin.approvals.services.sessions.session_active": [
        Case(
            run=lambda w: approvals_sessions.session_active(w.idle_session, timezone.now()),
            no_event=(
                "an answer's activity on the session it lands on (S12): last_seen_at moved, as "
                "first sight moves it; the answer's own event, in the same transaction, records "
                "the answer"
            ),
        )
    ],
    "aimon_admin.approvals.services.sessions.session_lookup": [
        Case(
            run=lambda w: approvals_sessions.session_lookup(runtime=w.runtime, session_id="s-1"),
            reads="a lookup",
        )
    ],
    "aimon_admin.approvals.services.decisions.skills_decide": [
        Case(
            run=lambda w: approvals.skills_decide(
                runtime=w.runtime,
                skills=["deploy", "publish", "other"],
                session=Session.objects.get(session_id="s-1"),
                invoking_session=None,
                turn_id=None,
            ),
            reads="a decision (S2) reads the chain and writes nothing",
        )
    ],
    "aimon_admin.approvals.services.requests.request_shape": [
        Case(run=lambda w: approvals_requests.request_shape(w.session_request), reads=PURE)
    ],
    "aimon_admin.approvals.services.requests.request_create": [
        Case(
            run=lambda w: approvals.request_create(
                approvals.RequestInput(
                    runtime=w.runtime, skills=["ship"], session_id="s-1", principal="alice"
                )
            ),
            no_event=(
                "a runtime opening a request allows nothing: the request row (runtime, session, "
                "principal, created_at, expires_at) is its record; every outcome (grant, "
                "escalation, abort-deny) is an event"
            ),
            channel=Channel.API,
        )
    ],
    "aimon_admin.approvals.services.request_views.request_view_record": [
        Case(
            run=lambda w: request_views.request_view_record(request=w.session_request, user=w.approver),
            no_event=(
                "who first opened a request's page, shown on its timeline: a read by a person "
                "signed in, which answers and changes nothing of the request (P1)"
            ),
        )
    ],
    "aimon_admin.approvals.services.request_views.request_answer_sent": [
        Case(
            prepare=_closed_request,
            run=lambda w: request_views.request_answer_sent(request=w.session_request, waited=True),
            no_event=(
                "when the runtime was first sent its closed request, shown on the request's "
                "timeline (woken): a read by the runtime, which changes no answer; the answers "
                "themselves are events"
            ),
            channel=Channel.API,
        )
    ],
    "aimon_admin.approvals.services.answers.user_may_answer": [
        Case(run=lambda w: user_may_answer(w.approver, w.session_request), reads="a permission check")
    ],
    "aimon_admin.approvals.services.answers.user_may_grant_agent": [
        Case(
            run=lambda w: approvals_answers.user_may_grant_agent(w.approver, w.runtime),
            reads="a permission check",
        )
    ],
    "aimon_admin.approvals.services.answers.answers_for": [
        Case(
            run=lambda w: approvals_answers.answers_for(
                w.operator, w.session_request, w.session_request.items.first()
            ),
            reads="the buttons offered",
        )
    ],
    "aimon_admin.approvals.services.answers.request_answer": [
        Case(
            run=lambda w: _answer(w, w.session_request, w.approver, Answer.ALLOW_SESSION),
            expect=(AuditAction.SKILL_GRANTED,),
            actor=lambda w: Actor.for_user(w.approver),
        ),
        Case(
            run=lambda w: _answer(w, w.sessionless_request, w.operator, Answer.ALLOW_SESSION),
            expect=(AuditAction.SKILL_GRANT_ESCALATED,),
            actor=_op,
            check=_check_escalation,
        ),
        Case(  # U3, U7: a tool grant, with its pattern
            prepare=_pending_tool_request,
            run=lambda w: _answer(w, w.prepared, w.approver, Answer.ALLOW_SESSION, "make deploy"),
            expect=(AuditAction.TOOL_GRANTED,),
            actor=lambda w: Actor.for_user(w.approver),
        ),
        Case(  # U4, U7: a call approved, with its digest
            prepare=_pending_tool_request,
            run=lambda w: _answer(w, w.prepared, w.approver, Answer.ALLOW_CALL),
            expect=(AuditAction.TOOL_CALL_APPROVED,),
            actor=lambda w: Actor.for_user(w.approver),
        ),
        Case(  # P3: one of two people allows: that allow recorded and audited, no grant yet
            prepare=_needs_two_people,
            run=lambda w: _answer(w, w.session_request, w.operator, Answer.ALLOW_SESSION),
            expect=(AuditAction.APPROVAL_ALLOW_RECORDED,),
            actor=_op,
        ),
    ],
    "aimon_admin.approvals.services.two_person.request_owner": [
        Case(run=lambda w: approvals_two_person.request_owner(w.session_request), reads="whose request it is")
    ],
    "aimon_admin.approvals.services.two_person.allow_check": [
        Case(
            prepare=_needs_two_people,
            run=lambda w: approvals_two_person.allow_check(
                request=w.session_request,
                user=w.operator,
                answer=Answer.ALLOW_SESSION,
                pattern="",
                items=list(w.session_request.items.all()),
            ),
            reads="P3's checks before an allow is written: it refuses (raises) or lets it through",
        )
    ],
    "aimon_admin.approvals.services.two_person.item_allow": [
        Case(  # P3: one of two people allows: recorded and audited, no grant yet
            prepare=_needs_two_people,
            run=_item_allow,
            expect=(AuditAction.APPROVAL_ALLOW_RECORDED,),
            actor=_op,
        )
    ],
    "aimon_admin.approvals.services.item_answers.item_answer": [
        Case(
            run=_item_answer,
            expect=(AuditAction.SKILL_GRANTED,),
            actor=lambda w: Actor.for_user(w.approver),
        )
    ],
    "aimon_admin.approvals.services.grants.grant_write": [
        Case(
            run=_grant_write,
            no_event=(
                "a step of an answer (item_answers.item_answer) or of an abort's denial (S9): the "
                "grant row alone; its caller claims the item and writes the grant's event in the "
                "same transaction, after the claim (A3, in the locks' order)"
            ),
        )
    ],
    "aimon_admin.approvals.services.grants.grant_subject": [
        Case(run=lambda w: approvals_grants.grant_subject(w.session_request, "migrate", ""), reads=PURE)
    ],
    "aimon_admin.approvals.services.requests.request_cancel": [
        Case(
            run=lambda w: approvals.request_cancel(request=w.cancel_request, actor=w.as_runtime),
            expect=(AuditAction.SKILL_ABORT_DENIED,),
            actor=_rt,
            channel=Channel.API,
        ),
        Case(  # S9 for a tool call: its exact subject denied for the session
            prepare=_pending_tool_request,
            run=lambda w: approvals.request_cancel(request=w.prepared, actor=w.as_runtime),
            expect=(AuditAction.TOOL_ABORT_DENIED,),
            actor=_rt,
            channel=Channel.API,
        ),
    ],
    "aimon_admin.approvals.services.requests.request_expire_if_due": [
        Case(
            run=lambda w: approvals.request_expire_if_due(w.due_request),
            expect=(AuditAction.SKILL_ABORT_DENIED,),
            actor=lambda w: Actor.system("request-expiry"),
        )
    ],
    "aimon_admin.approvals.services.requests.requests_expire_due": [
        Case(
            run=lambda w: approvals.requests_expire_due(),
            expect=(AuditAction.SKILL_ABORT_DENIED,),
            actor=lambda w: Actor.system("request-expiry"),
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.approvals.services.escalation.escalation_due_at": [
        Case(
            run=lambda w: approvals_escalation.escalation_due_at(w.session_request), reads="reads the runtime"
        )
    ],
    "aimon_admin.approvals.services.escalation.request_escalate_if_due": [
        Case(
            prepare=_overdue_request,
            run=lambda w: approvals_escalation.request_escalate_if_due(w.session_request),
            expect=(AuditAction.REQUEST_ESCALATED,),
            actor=lambda w: Actor.system("request-escalation"),
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.approvals.services.escalation.requests_escalate_due": [
        Case(
            prepare=_overdue_request,
            run=lambda w: approvals_escalation.requests_escalate_due(),
            expect=(AuditAction.REQUEST_ESCALATED,),
            actor=lambda w: Actor.system("request-escalation"),
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.approvals.services.revocation.session_clear": [
        Case(
            run=lambda w: approvals.session_clear(runtime=w.runtime, session_id="s-1", actor=w.as_runtime),
            expect=(AuditAction.SESSION_CLEARED,),
            actor=_rt,
            check=_check_counts("removed", lambda w: 1),
            channel=Channel.API,
        )
    ],
    "aimon_admin.approvals.services.revocation.session_revoke": [
        Case(
            run=lambda w: approvals.session_revoke(
                runtime=w.runtime, session_id="s-1", agent=True, actor=w.op
            ),
            expect=(AuditAction.SESSION_REVOKED,),
            actor=_op,
            check=_check_counts("removed_agent", lambda w: 1),
        )
    ],
    "aimon_admin.approvals.services.revocation.agent_grants_revoke": [
        Case(
            run=lambda w: approvals.agent_grants_revoke(runtime=w.runtime, actor=w.op),
            expect=(AuditAction.AGENT_GRANTS_REVOKED,),
            actor=_op,
            check=_check_counts("removed_agent", lambda w: 1),
        )
    ],
    "aimon_admin.approvals.services.revocation.grant_revoke": [
        Case(
            run=lambda w: approvals.grant_revoke(grant=w.session_grant, actor=Actor.for_user(w.approver)),
            expect=(AuditAction.GRANT_REVOKED,),
            actor=lambda w: Actor.for_user(w.approver),
        )
    ],
    "aimon_admin.approvals.services.revocation.grant_undo": [
        Case(
            run=lambda w: approvals.grant_undo(grant=w.session_grant, user=w.approver),
            expect=(AuditAction.GRANT_REVOKED,),
            actor=lambda w: Actor.for_user(w.approver),
        )
    ],
    "aimon_admin.approvals.services.revocation.undo_refusal": [
        Case(
            run=lambda w: revocation.undo_refusal(grant=w.session_grant, user=w.approver),
            reads="whether the answer's grant may be undone by this person now",
        )
    ],
    "aimon_admin.approvals.rules.rule_index": [
        Case(run=lambda w: rules.rule_index(), reads="the cached rule index")
    ],
    "aimon_admin.approvals.rules.rule_create": [
        Case(
            run=lambda w: rules.rule_create(pattern="rm-*", action=RuleAction.DENY, actor=w.op),
            expect=(AuditAction.RULE_CREATED,),
            actor=_op,
        )
    ],
    "aimon_admin.approvals.rules.rule_delete": [
        Case(
            run=lambda w: rules.rule_delete(rule=w.rule, actor=w.op),
            expect=(AuditAction.RULE_DELETED,),
            actor=_op,
        ),
        Case(
            prepare=_tool_rule,
            run=lambda w: rules.rule_delete(rule=w.prepared, actor=w.op),
            expect=(AuditAction.TOOL_RULE_DELETED,),
            actor=_op,
        ),
    ],
    "aimon_admin.approvals.tool_rules.tool_rule_index": [
        Case(run=lambda w: tool_rules.tool_rule_index(), reads="the cached tool rule index")
    ],
    "aimon_admin.approvals.tool_rules.whole_tool_problem": [
        Case(
            run=lambda w: tool_rules.whole_tool_problem(
                server="", tool="Bash", pattern="", action=RuleAction.ALLOW, runtime=w.runtime
            ),
            reads="why an allow of the whole of a tool is refused, from its registrations",
        )
    ],
    "aimon_admin.approvals.tool_rules.tool_rule_check": [
        Case(
            run=lambda w: tool_rules.tool_rule_check(ToolRule(tool="Bash", action=RuleAction.DENY)),
            reads="checks a tool rule before it is written; refusing, it raises",
        )
    ],
    "aimon_admin.approvals.tool_rules.tool_rule_preview": [
        Case(
            run=lambda w: tool_rules.tool_rule_preview(text="Bash(git:*)", action=RuleAction.ALLOW),
            reads="what a rule would match, before it is saved",
        )
    ],
    "aimon_admin.approvals.tool_rules.tool_rule_warnings": [
        Case(
            prepare=_tool_rule,
            run=lambda w: tool_rules.tool_rule_warnings(w.prepared),
            reads="what the person who saved a rule should know: its tool is registered by nobody yet",
        )
    ],
    "aimon_admin.approvals.tool_rules.unattended_allow_rules": [
        Case(
            run=lambda w: tool_rules.unattended_allow_rules(w.runtime),
            reads="which ALLOW rules answer a runtime's unattended calls, for the gate pages",
        )
    ],
    "aimon_admin.approvals.tool_rules.unattended_allow_rules_many": [
        Case(
            run=lambda w: tool_rules.unattended_allow_rules_many([w.runtime]),
            reads="the same for several runtimes at once, for the home's forecast",
        )
    ],
    "aimon_admin.approvals.config.config_apply": [
        Case(
            run=lambda w: approvals_config.config_apply(
                registry_config.config_parse(
                    RULES_YAML, filename="rules.yaml", sections=approvals_config.SECTIONS
                ),
                actor=w.op,
            ),
            expect=(
                AuditAction.CONFIG_LOADED,
                AuditAction.TOOL_SUBJECT_SET,
                AuditAction.TOOL_RULE_CREATED,
                AuditAction.RULE_CREATED,
            ),
            actor=_op,
            channel=Channel.CLI,
        )
    ],
    "aimon_admin.approvals.rules.tool_rule_create": [
        Case(
            prepare=lambda w: registry.tool_subject_set(
                server=None, tool="Bash", argument="command", actor=w.op
            ),
            run=lambda w: rules.tool_rule_create(
                text="Bash(make test)",
                action=RuleAction.ALLOW,
                runtime=w.runtime,
                unattended=True,
                actor=w.op,
            ),
            expect=(AuditAction.TOOL_RULE_CREATED,),
            actor=_op,
        )
    ],
    # the audit log itself
    "aimon_admin.audit.services.audit_record": [
        Case(
            run=lambda w: _record_in_transaction(w),
            expect=(AuditAction.RUNTIME_SETTINGS_CHANGED,),
            actor=_op,
            changes=False,
        )
    ],
    "aimon_admin.audit.verification.walk": [
        Case(
            run=lambda w: verification.walk(iter([]), after_seq=0, after_hash=chain.GENESIS_HASH), reads=PURE
        )
    ],
    "aimon_admin.audit.verification.checkpoint_from_cache": [
        Case(run=lambda w: verification.checkpoint_from_cache(), reads="reads the cache")
    ],
    "aimon_admin.audit.verification.checkpoint_forget": [
        Case(
            run=lambda w: verification.checkpoint_forget(),
            no_event=(
                "drops the cache's copy of the last checkpoint (a new, empty database): no "
                "product state; the log's own verification events stay"
            ),
        )
    ],
    "aimon_admin.audit.verification.checkpoint_from_log": [
        Case(run=lambda w: verification.checkpoint_from_log(), reads="reads the newest verification event")
    ],
    "aimon_admin.audit.verification.audit_chain_check": [
        Case(run=lambda w: verification.audit_chain_check(full=True), reads="walks the chain, writes nothing")
    ],
    "aimon_admin.audit.verification.audit_chain_verification_record": [
        Case(
            run=lambda w: verification.audit_chain_verification_record(
                result=verification.audit_chain_check(full=True), actor=Actor.system("audit-verifier")
            ),
            expect=(AuditAction.AUDIT_CHAIN_VERIFIED,),
            actor=lambda w: Actor.system("audit-verifier"),
            changes=False,
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.audit.verification.audit_chain_verify": [
        Case(
            run=lambda w: verification.audit_chain_verify(actor=w.op, full=False),
            expect=(AuditAction.AUDIT_CHAIN_VERIFIED,),
            actor=_op,
            changes=False,
            channel=Channel.CLI,
        )
    ],
    "aimon_admin.audit.verification.last_verification": [
        Case(run=lambda w: verification.last_verification(), reads="reads the newest verification event")
    ],
    "aimon_admin.audit.verification.verify_export_file": [
        Case(
            prepare=_export_file,
            run=lambda w: verification.verify_export_file(Path(w.prepared)),
            reads="reads an exported file",
        )
    ],
    "aimon_admin.audit.services.audit_chain_head": [
        Case(run=lambda w: audit.audit_chain_head(), reads="a read")
    ],
    "aimon_admin.audit.services.audit_verify_chain": [
        Case(run=lambda w: audit.audit_verify_chain(), reads="walks the chain, writes nothing")
    ],
    # notifications (P1, P2, P4)
    "aimon_admin.notifications.services.channels.channel_add": [
        Case(
            run=lambda w: notifications.channel_add(
                owner=w.approver,
                kind=ChannelKind.EMAIL,
                name="work",
                target="alice@example.test",
                actor=Actor.for_user(w.approver),
            ),
            expect=(AuditAction.NOTIFICATION_CHANNEL_ADDED,),
            actor=lambda w: Actor.for_user(w.approver),
        ),
        Case(
            prepare=lambda w: w.secrets.append(CHAT_TOKEN),
            run=lambda w: notifications.channel_add(
                owner=w.approver,
                kind=ChannelKind.APPRISE,
                name="chat",
                target=CHAT_URL,
                actor=Actor.for_user(w.approver),
            ),
            expect=(AuditAction.NOTIFICATION_CHANNEL_ADDED,),
            actor=lambda w: Actor.for_user(w.approver),
        ),
    ],
    "aimon_admin.notifications.services.channels.new_webhook_secret": [
        Case(run=lambda w: notifications.new_webhook_secret(), reads=PURE)
    ],
    "aimon_admin.notifications.services.channels.webhook_create": [
        Case(
            run=lambda w: _remember_secret(
                w, notifications.webhook_create(name="siem", url="http://127.0.0.1:9/hook", actor=w.op)
            ),
            expect=(AuditAction.NOTIFICATION_CHANNEL_ADDED,),
            actor=_op,
        )
    ],
    "aimon_admin.notifications.services.channels.webhook_secret_problem": [
        Case(run=lambda w: notifications.webhook_secret_problem("whsec_short"), reads=PURE)
    ],
    "aimon_admin.notifications.config.config_read": [
        Case(
            prepare=_config_file,
            run=lambda w: notifications_config.config_read(w.prepared),
            reads="reads and checks a file; config_apply writes",
        )
    ],
    "aimon_admin.notifications.config.config_parse": [
        Case(run=lambda w: notifications_config.config_parse(WEBHOOKS_YAML, filename="c.yaml"), reads=PURE)
    ],
    "aimon_admin.notifications.config.config_apply": [
        Case(
            run=_load_webhooks,
            expect=(AuditAction.CONFIG_LOADED, AuditAction.NOTIFICATION_CHANNEL_ADDED),
            actor=_op,
            channel=Channel.CLI,
        )
    ],
    "aimon_admin.notifications.services.channels.webhook_rotate": [
        Case(
            prepare=_webhook,
            run=lambda w: _remember_secret(w, notifications.webhook_rotate(channel=w.prepared, actor=w.op)),
            expect=(AuditAction.WEBHOOK_SECRET_ROTATED,),
            actor=_op,
        )
    ],
    "aimon_admin.notifications.services.channels.channel_remove": [
        Case(
            prepare=_alice_channel,
            run=lambda w: notifications.channel_remove(channel=w.prepared, actor=Actor.for_user(w.approver)),
            expect=(AuditAction.NOTIFICATION_CHANNEL_REMOVED,),
            actor=lambda w: Actor.for_user(w.approver),
        )
    ],
    "aimon_admin.notifications.services.channels.preference_set": [
        Case(
            run=lambda w: notifications.preference_set(
                user=w.approver,
                digest_minutes=30,
                quiet_start=None,
                quiet_end=None,
                timezone_name="UTC",
                actor=Actor.for_user(w.approver),
            ),
            expect=(AuditAction.NOTIFICATION_PREFERENCES_CHANGED,),
            actor=lambda w: Actor.for_user(w.approver),
        )
    ],
    "aimon_admin.notifications.services.delivery.request_fan_out": [
        Case(
            prepare=_unannounced_request,
            run=lambda w: notifications.request_fan_out(
                request_id=str(w.session_request.pk), event=NotificationEvent.REQUESTED
            ),
            no_event=(
                "deliveries and their fan-out marker are the delivery log; the request's opening is "
                "its own record, and what becomes of each delivery is audited when it matters"
            ),
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.notifications.services.delivery.fanout_owe": [
        Case(
            run=lambda w: notifications.fanout_owe(
                request_id=str(w.session_request.pk), events=[NotificationEvent.ESCALATED]
            ),
            no_event=(
                "what a request owes its channels, written inside the transaction that changed the "
                "request (core.hooks), whose own event records the change"
            ),
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.notifications.services.delivery.checkpoint_owe": [
        Case(
            prepare=_witnessed_checkpoint(owed=False),
            run=lambda w: notifications.checkpoint_owe(checkpoint_id=str(w.prepared.pk)),
            no_event=(
                "what a signed checkpoint owes its witnesses, written inside the transaction that "
                "signed it (core.hooks); the checkpoint is the audit log's own record"
            ),
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.notifications.services.delivery.checkpoint_fan_out": [
        Case(
            prepare=_witnessed_checkpoint(owed=True),
            run=lambda w: notifications.checkpoint_fan_out(checkpoint_id=str(w.prepared.pk)),
            no_event=(
                "deliveries and their fan-out marker are the delivery log; what becomes of each "
                "delivery is audited when it matters"
            ),
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.notifications.services.delivery.deliveries_take": [
        Case(
            prepare=_due_delivery,
            run=lambda w: notifications.deliveries_take(ids=[w.prepared.pk]),
            no_event="a lease on a delivery about to be queued, so it is queued once; nothing is sent",
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.notifications.services.delivery.leases_end": [
        Case(
            prepare=_queued_delivery,
            run=lambda w: notifications.leases_end(deliveries=[w.prepared.pk]),
            no_event="a delivery's task could not be queued: its lease ends so the sweep queues it",
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.notifications.services.delivery.channel_test": [
        Case(
            prepare=_alice_channel,
            run=lambda w: notifications.channel_test(channel=w.prepared, actor=Actor.for_user(w.approver)),
            no_event="a test message changes nothing; its outcome is in the delivery log",
        )
    ],
    "aimon_admin.notifications.services.delivery.delivery_send": [
        Case(
            prepare=_due_delivery,
            run=lambda w: notifications.delivery_send(delivery_id=w.prepared.pk),
            no_event="each message sent is in the delivery log, attempt by attempt, not the audit log",
            channel=Channel.TASK,
        ),
        Case(
            prepare=_failing_delivery(attempts=0, failures=lambda: settings.AIMON_NOTIFY_BROKEN_AFTER - 1),
            run=_send_again,
            expect=(AuditAction.NOTIFICATION_CHANNEL_BROKEN,),
            actor=lambda w: Actor.system("notifications"),
            bookkeeping={"notifications_delivery": SEND_CLAIM},
            channel=Channel.TASK,
        ),
        Case(
            prepare=_failing_delivery(attempts=lambda: settings.AIMON_NOTIFY_MAX_ATTEMPTS - 1, failures=0),
            run=_send_again,
            expect=(AuditAction.NOTIFICATION_GAVE_UP,),
            actor=lambda w: Actor.system("notifications"),
            bookkeeping={"notifications_delivery": SEND_CLAIM},
            channel=Channel.TASK,
        ),
    ],
    "aimon_admin.notifications.services.delivery.digest_send": [
        Case(
            prepare=_held_delivery,
            run=lambda w: notifications.digest_send(channel_id=w.prepared.channel_id),
            no_event="a digest sent is in the delivery log, as each message is",
            channel=Channel.TASK,
        )
    ],
    "aimon_admin.notifications.services.delivery.deliveries_sweep": [
        Case(
            prepare=_lapsed_delivery,
            run=lambda w: notifications.deliveries_sweep(),
            no_event="hands a dead worker's claim back (PENDING again); what is sent then is logged",
            channel=Channel.TASK,
        )
    ],
}


def _record_in_transaction(w: World) -> AuditEvent:
    from django.db import transaction

    with transaction.atomic():
        return audit.audit_record(action=AuditAction.RUNTIME_SETTINGS_CHANGED, actor=w.op, details={"x": 1})


# --- Helpers --------------------------------------------------------------------------------------


def discover_service_functions() -> set[str]:
    """Dotted names of every public function defined in a service module."""
    root = Path(aimon_admin.__file__).parent
    found: set[str] = set()
    for pattern in SERVICE_MODULE_GLOBS:
        for path in sorted(root.glob(pattern)):
            module_name = ".".join(("aimon_admin", *path.relative_to(root).with_suffix("").parts))
            module_name = module_name.removesuffix(".__init__")
            module = importlib.import_module(module_name)
            for name, value in vars(module).items():
                if not name.startswith("_") and inspect.isfunction(value) and value.__module__ == module_name:
                    found.add(f"{module_name}.{name}")
    return found


def snapshot() -> dict[str, set[str]]:
    """Every row of every product table, as text (audit excluded)."""
    tables: dict[str, set[str]] = {}
    for model in apps.get_models(include_auto_created=True):
        if model._meta.app_label not in PRODUCT_APPS:
            continue
        rows = model._base_manager.values_list()
        tables[model._meta.db_table] = {json.dumps(row, default=str, sort_keys=True) for row in rows}
    return tables


def changed_tables(before: dict[str, set[str]], after: dict[str, set[str]]) -> set[str]:
    return {table for table in before.keys() | after.keys() if before.get(table) != after.get(table)}


def head_seq() -> int:
    return audit.audit_chain_head()[0]


def events_since(seq: int) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(seq__gt=seq).order_by("seq"))


REFUSED = "coverage: audit insert refused"


def refuse_audit_inserts(on: bool) -> None:
    """A trigger that refuses every audit insert, so a service's change must roll back (A3)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            if on:
                cursor.execute(
                    "CREATE OR REPLACE FUNCTION coverage_refuse_audit() RETURNS trigger LANGUAGE plpgsql "
                    f"AS $$ BEGIN RAISE EXCEPTION '{REFUSED}'; END $$;"
                )
                cursor.execute(
                    "CREATE TRIGGER coverage_refuse_audit BEFORE INSERT ON audit_auditevent "
                    "FOR EACH ROW EXECUTE FUNCTION coverage_refuse_audit();"
                )
            else:
                cursor.execute("DROP TRIGGER IF EXISTS coverage_refuse_audit ON audit_auditevent;")
        elif on:
            cursor.execute(
                "CREATE TRIGGER coverage_refuse_audit BEFORE INSERT ON audit_auditevent "
                f"BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END;"
            )
        else:
            cursor.execute("DROP TRIGGER IF EXISTS coverage_refuse_audit;")


def changes_with_audit_refused(call: Callable[[], Any]) -> set[str]:
    """The product tables `call` changed while every audit insert was refused.

    The call must have tried to write its event (and met the refusal): a call that did
    nothing would prove nothing.
    """
    before, seq = snapshot(), head_seq()
    refuse_audit_inserts(True)
    refused = False
    try:
        with bound(channel=Channel.SYSTEM, request_id="cov-refused"):
            call()
    except Exception as exc:
        refused = REFUSED in str(exc)
        if not refused:
            raise
    finally:
        refuse_audit_inserts(False)
    assert refused, "the call wrote no event to refuse: nothing was tested"
    assert head_seq() == seq
    return changed_tables(before, snapshot())


def secret_values(world: World) -> list[str]:
    """What must never appear in an event: the world's secrets, and every stored hash of one."""
    hashes = [p for p in User.objects.values_list("password", flat=True) if p]
    hashes += list(RuntimeToken.objects.values_list("token_hash", flat=True))
    return [*world.secrets, *hashes]


def assert_no_secret(events: list[AuditEvent], secrets: list[str]) -> None:
    for event in events:
        text = json.dumps(event.content(), default=str, ensure_ascii=False) + event.hash
        leaked = [secret for secret in secrets if secret in text]
        assert not leaked, f"event #{event.seq} {event.action} holds a secret: {leaked}"


def check_event(event: AuditEvent, *, channel: str, request_id: str, actor: Actor | None) -> None:
    """Channel, request id and actor: the ones bound for the call, or the eager task's own."""
    assert event.actor_label, f"#{event.seq} names no actor"
    if event.channel == Channel.TASK and channel != Channel.TASK:
        # An eager task run by the call (on commit) says so, under its own request id.
        assert event.request_id.startswith("task-"), event.request_id
        return
    assert (event.channel, event.request_id) == (channel, request_id), f"#{event.seq} {event.action}"
    if actor is not None:
        assert (event.actor_id, event.actor_label) == (actor.user.pk if actor.user else None, actor.label)
        if actor.runtime is not None:
            assert event.runtime_id == actor.runtime.pk


CASE_IDS = [(name, index) for name, cases in CASES.items() for index in range(len(cases))]


# --- Tests ----------------------------------------------------------------------------------------


def test_every_service_function_has_an_entry() -> None:
    # A1: a new service without an entry here fails, and so does an entry for one that is gone.
    found = discover_service_functions()
    missing = sorted(found - CASES.keys())
    stale = sorted(CASES.keys() - found)
    assert not missing, f"service functions with no coverage entry: {missing}"
    assert not stale, f"coverage entries for functions that no longer exist: {stale}"


def test_every_entry_says_what_it_writes_or_why_it_writes_nothing() -> None:
    for name, cases in CASES.items():
        for case in cases:
            kinds = [bool(case.expect), bool(case.reads), bool(case.no_event)]
            assert kinds.count(True) == 1, f"{name}: exactly one of expect, reads, no_event"
            assert not case.expect or case.actor is not None, f"{name}: which actor must the events name?"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("name", "index"), CASE_IDS, ids=[f"{n.rsplit('.', 1)[1]}-{i}" for n, i in CASE_IDS])
def test_service_writes_its_events_in_the_same_transaction(name: str, index: int) -> None:
    # A1, A3
    case = CASES[name][index]
    request_id = f"cov-{index}-{name.rsplit('.', 1)[1]}"[:64]
    with bound(channel=Channel.SYSTEM, request_id="cov-setup"):
        world = build_world()
    with world.stack:
        if case.prepare is not None:
            with bound(channel=Channel.SYSTEM, request_id="cov-setup"):
                case.prepare(world)
        assert_no_secret(events_since(0), secret_values(world))

        if case.expect:
            # A3: with every audit insert refused, the call changes nothing (bookkeeping aside).
            unaudited = changes_with_audit_refused(lambda: case.run(world)) - case.bookkeeping.keys()
            assert not unaudited, f"{name} changed {sorted(unaudited)} although its event was refused"

        before, seq = snapshot(), head_seq()
        with bound(channel=case.channel, request_id=request_id):
            case.run(world)
        changed = changed_tables(before, snapshot())
        events = events_since(seq)
        actions = {event.action for event in events}

        if case.reads:
            assert not changed, f"{name} is listed as a read but changed {sorted(changed)}"
            assert not events, f"{name} is listed as a read but wrote {sorted(actions)}"
            return
        if case.no_event:
            assert not events, f"{name} now writes {sorted(actions)}: give it expected actions"
            return
        assert changed or not case.changes, f"{name} changed nothing here: the entry's data is wrong"
        missing = set(case.expect) - actions
        assert not missing, f"{name} changed {sorted(changed)} without {sorted(missing)}"
        expected_actor = case.actor(world) if case.actor else None
        for event in events:
            check_event(event, channel=case.channel, request_id=request_id, actor=expected_actor)
        assert_no_secret(events, secret_values(world))
        if case.check is not None:
            case.check(world, events)


@pytest.mark.django_db(transaction=True)
def test_the_refused_audit_check_catches_a_change_committed_apart_from_its_event() -> None:
    # A3: the check above cannot pass by accident. A careless writer (here, in the test)
    # commits its change and then records the event in a second transaction.
    from django.db import transaction

    with bound(channel=Channel.SYSTEM, request_id="cov-setup"):
        world = build_world()

    def careless() -> None:
        AgentRuntime.objects.filter(pk=world.runtime.pk).update(description="changed unaudited")
        with transaction.atomic():
            audit.audit_record(action=AuditAction.RUNTIME_SETTINGS_CHANGED, actor=world.op)

    def careful() -> None:
        runtimes.runtime_update_settings(
            runtime=world.runtime,
            ceiling="READ_ONLY",
            exempt_at_or_below="READ_ONLY",
            owner=None,
            description="changed with its event",
            actor=world.op,
        )

    assert changes_with_audit_refused(careful) == set()
    assert changes_with_audit_refused(careless) == {AgentRuntime._meta.db_table}


# --- Entry points: channel and request id ---------------------------------------------------------


@pytest.mark.django_db
def test_a_browser_post_stamps_browser_and_the_middlewares_request_id(client: Client) -> None:
    # A1
    with bound(channel=Channel.SYSTEM, request_id="cov-setup"):
        world = build_world()
    client.force_login(world.operator)
    seq = head_seq()
    response = client.post(
        f"/runtimes/{world.runtime.name}/settings/",
        {
            "ceiling": "READ_ONLY",
            "exempt_at_or_below": "READ_ONLY",
            "owner": "",
            "description": "via the browser",
        },
    )
    assert response.status_code == 302
    (event,) = events_since(seq)
    assert event.action == AuditAction.RUNTIME_SETTINGS_CHANGED
    assert (event.channel, event.actor, event.request_id) == (
        Channel.BROWSER,
        world.operator,
        response[REQUEST_ID_HEADER],
    )
    assert len(event.request_id) >= 16


@pytest.mark.django_db
def test_a_sign_in_writes_last_login_with_its_event(client: Client) -> None:
    # A1, A3: Django's own last_login receiver is replaced by login_record's write.
    with bound(channel=Channel.SYSTEM, request_id="cov-setup"):
        world = build_world()
    seq = head_seq()
    response = client.post(
        "/accounts/login/", {"username": "alice", "password": PASSWORD}, HTTP_X_REQUEST_ID="cov-login-ok"
    )
    assert response.status_code == 302
    (event,) = events_since(seq)
    assert (event.action, event.actor, event.channel, event.request_id) == (
        AuditAction.LOGIN_SUCCEEDED,
        world.approver,
        Channel.BROWSER,
        "cov-login-ok",
    )
    assert world.approver.last_login is None  # the object as it was before signing in
    world.approver.refresh_from_db()
    assert abs(world.approver.last_login - event.created_at) < timedelta(seconds=5)
    assert_no_secret([event], secret_values(world))


@pytest.mark.django_db
def test_a_failed_sign_in_is_recorded_without_the_password(client: Client) -> None:
    # A1: failed logins, never the password typed.
    with bound(channel=Channel.SYSTEM, request_id="cov-setup"):
        world = build_world()
    seq = head_seq()
    typed = "cov-wrong-password-typed"
    response = client.post(
        "/accounts/login/", {"username": "alice", "password": typed}, HTTP_X_REQUEST_ID="cov-login-1"
    )
    assert response.status_code == 303  # back to the sign-in page (post/redirect/get)
    (event,) = events_since(seq)
    assert (event.action, event.level, event.subject, event.channel, event.request_id) == (
        AuditAction.LOGIN_FAILED,
        AuditLevel.WARNING,
        "alice",
        Channel.BROWSER,
        "cov-login-1",
    )
    assert_no_secret([event], [typed, *secret_values(world)])


@pytest.mark.django_db
def test_an_api_call_stamps_api_the_runtime_and_its_request_id() -> None:
    # A1
    with bound(channel=Channel.SYSTEM, request_id="cov-setup"):
        world = build_world()
        _, plaintext = runtimes.token_issue(runtime=world.runtime, actor=world.op, label="api")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    seq = head_seq()
    response = api.put(
        "/api/v1/tools", {"tools": [{"name": "Edit", "description": "Edit a file"}]}, format="json"
    )
    assert response.status_code == 200
    (event,) = events_since(seq)
    assert (event.action, event.channel, event.actor_label, event.runtime, event.actor) == (
        AuditAction.LOCAL_TOOLS_REPLACED,
        Channel.API,
        f"runtime:{world.runtime.name}",
        world.runtime,
        None,
    )
    assert event.request_id == response[REQUEST_ID_HEADER]
    assert_no_secret([event], [plaintext, *secret_values(world)])


@pytest.mark.django_db
def test_a_management_command_stamps_cli_and_one_request_id_for_the_command() -> None:
    # A1
    out, err = StringIO(), StringIO()
    seq = head_seq()
    call_command("create_runtime", "cov-cli-agent", stdout=out, stderr=err)
    token = out.getvalue().strip().splitlines()[-1]
    events = events_since(seq)
    assert [e.action for e in events] == [AuditAction.RUNTIME_CREATED, AuditAction.TOKEN_ISSUED]
    assert {e.channel for e in events} == {Channel.CLI}
    assert len({e.request_id for e in events}) == 1
    assert events[0].request_id
    assert all(e.actor_label.startswith("cli:") for e in events)
    assert_no_secret(events, [token])


@pytest.mark.django_db
def test_a_celery_task_stamps_task_and_its_task_id() -> None:
    # A1: the beat task that expires requests (eager here) writes its abort-denies as a task.
    with bound(channel=Channel.SYSTEM, request_id="cov-setup"):
        world = build_world()
    seq = head_seq()
    with bound(channel=Channel.BROWSER, request_id="cov-outer"):
        result = expire_due_requests.apply_async()
        events = events_since(seq)
        assert result.get() == 1
        # The task's context is undone once it ends: the caller's own is back.
        from aimon_admin.core.context import current_channel, current_request_id

        assert (current_channel(), current_request_id()) == (Channel.BROWSER, "cov-outer")
    assert [e.action for e in events] == [AuditAction.SKILL_ABORT_DENIED]
    (event,) = events
    assert (event.channel, event.request_id, event.actor_label, event.runtime) == (
        Channel.TASK,
        f"task-{result.id}",
        "request-expiry",
        world.runtime,
    )
    assert ApprovalRequest.objects.get(pk=world.due_request.pk).status == RequestStatus.EXPIRED
