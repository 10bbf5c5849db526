"""`python manage.py demo_data`: something to click on the embedded default (idempotent).

Creates one person per role and a demo runtime with a token, and prints their
credentials. The credentials are kept in DEMO_CREDENTIALS_FILE (git-ignored) so a
second run prints the same ones instead of piling up new tokens. Never run this
against a production database: it refuses unless AIMON_DEMO (or DJANGO_DEBUG) is on or
--force is given.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.db import transaction

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.accounts.services import user_create, user_set_password
from aimon_admin.approvals.choices import GrantScope, RequestKind, RequestStatus, RuleAction
from aimon_admin.approvals.models import ApprovalRequest, SkillRule
from aimon_admin.approvals.rules import rule_create
from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.core.actors import Actor
from aimon_admin.core.choices import SideEffectLevel
from aimon_admin.core.commands import CliCommand
from aimon_admin.registry.choices import AnnotationTrust, McpTransport
from aimon_admin.registry.models import McpServer
from aimon_admin.registry.services import (
    local_tools_replace,
    mcp_server_create,
    mcp_tools_record,
    tool_subject_set,
)
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.selectors import token_authenticate
from aimon_admin.runtimes.services import runtime_create, token_issue

DEMO_TOOLS = [
    {"name": "Read", "description": "Read a file.", "side_effect_level": "READ_ONLY"},
    {
        "name": "Write",
        "description": "Write a file in the workspace.",
        "side_effect_level": "MUTATING",
        "destructive_behavior": "NON_DESTRUCTIVE",
    },
    {"name": "Bash", "description": "Run a shell command."},
]
DEMO_REQUESTS = [
    {
        "skills": ["deploy-staging", "notify-team"],
        "session_id": "demo-session-1",
        "turn_id": "turn-1",
        "principal": "approver",
        "reason": "Deploy the release branch to staging, then tell the team.",
    },
    {
        "skills": ["read-logs", "drop-cache"],
        "invoking_session_id": "demo-session-1",
        "reason": "A sub-agent of demo-session-1 wants to read the logs and drop the cache.",
    },
    {
        "skills": ["nightly-backup"],
        "reason": "A scheduled run with no session wants to take the nightly backup.",
    },
]
# An MCP server whose claims are trusted, its shell tool's claims as the server would list them
# (recorded, not synced: the demo runs nothing), and a call of it waiting in the inbox (U2).
DEMO_SERVER = "shell"
DEMO_SERVER_TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command in the workspace.",
        "inputSchema": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
            "required": ["command"],
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    },
]
DEMO_TOOL_REQUEST = {
    "kind": RequestKind.TOOL,
    "skills": [],
    "tool": "Bash",
    "server": DEMO_SERVER,
    "arguments": {"command": "git push origin main", "description": "Push the release to origin"},
    "session_id": "demo-session-1",
    "turn_id": "turn-2",
    "principal": "approver",
    "reason": "Push the release branch to origin.",
}
DEMO_USERS = {"operator": Role.OPERATOR, "approver": Role.APPROVER, "auditor": Role.AUDITOR}
DEMO_RUNTIME = "demo-agent"


class Command(CliCommand):
    help = "Load demo people and a demo runtime, and print their credentials (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--force", action="store_true", help="run even without AIMON_DEMO (or DJANGO_DEBUG)"
        )
        parser.add_argument(
            "--url", default="http://127.0.0.1:8000/", help="where the server will answer (printed only)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not (settings.DEMO or settings.DEBUG) and not options["force"]:
            raise CommandError("demo_data is for the embedded demo (AIMON_DEMO=1); use --force")
        path = settings.DEMO_CREDENTIALS_FILE
        saved: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        actor = self.cli_actor()
        with transaction.atomic():
            for username, role in DEMO_USERS.items():
                password = saved.get(username) or secrets.token_urlsafe(9)
                user = User.objects.filter(username=username).first()
                if user is None:
                    user_create(username=username, password=password, roles=[role], actor=actor)
                elif not user.check_password(password):
                    user_set_password(user=user, password=password, actor=actor)
                saved[username] = password

            runtime = AgentRuntime.objects.filter(name=DEMO_RUNTIME).first()
            if runtime is None:
                runtime = runtime_create(
                    name=DEMO_RUNTIME,
                    ceiling=SideEffectLevel.MUTATING,
                    exempt_at_or_below=SideEffectLevel.READ_ONLY,
                    owner=User.objects.get(username="operator"),
                    description="A runtime for trying AIMON Admin out.",
                    actor=actor,
                )
            token = saved.get("token")
            if not token or token_authenticate(token) is None:
                _, token = token_issue(runtime=runtime, actor=actor, label="demo")
                saved["token"] = token
            local_tools_replace(runtime=runtime, tools=DEMO_TOOLS, actor=Actor.for_runtime(runtime))
            # Their subjects named, so a rule such as Bash(git push:*) can be tried at once (U1).
            tool_subject_set(server=None, tool="Bash", argument="command", actor=actor)
            tool_subject_set(server=None, tool="Write", argument="path", actor=actor)
            if not SkillRule.objects.exists():
                rule_create(
                    pattern="drop-*",
                    action=RuleAction.ASK,
                    widest_scope=GrantScope.SESSION,
                    note="Dangerous: never 'always'.",
                    actor=actor,
                )
            pending = ApprovalRequest.objects.filter(runtime=runtime, status=RequestStatus.PENDING)
            if not pending.exists():
                for request in DEMO_REQUESTS:
                    request_create(RequestInput(runtime=runtime, timeout_seconds=86400, **request))
            _demo_tool_request(runtime, actor)

        path.write_text(json.dumps(saved, indent=2))
        path.chmod(0o600)
        url = options["url"].rstrip("/")
        self.stdout.write(f"\nDemo people (sign in at {url}/):")
        for username, role in DEMO_USERS.items():
            self.stdout.write(f"  {role.label:<9} {username:<9} password: {saved[username]}")
        self.stdout.write(f"\nDemo runtime {DEMO_RUNTIME}, API token:\n  {saved['token']}")
        self.stdout.write(f"  try: curl -H 'Authorization: Bearer {saved['token']}' {url}/api/v1/runtime\n")


def _demo_tool_request(runtime: AgentRuntime, actor: Actor) -> None:
    """The shell server, its Bash tool (subject: `command`) and one call of it waiting, unless
    one is waiting already."""
    server = McpServer.objects.filter(name=DEMO_SERVER).first()
    if server is None:
        server = mcp_server_create(
            name=DEMO_SERVER,
            transport=McpTransport.STDIO,
            command="uvx",
            args=["mcp-shell-server"],
            annotation_trust=AnnotationTrust.TRUST,
            actor=actor,
        )
        mcp_tools_record(server=server, listing=DEMO_SERVER_TOOLS, actor=actor, complete=True)
    tool_subject_set(server=DEMO_SERVER, tool="Bash", argument="command", actor=actor)
    waiting = ApprovalRequest.objects.filter(
        runtime=runtime, kind=RequestKind.TOOL, status=RequestStatus.PENDING
    ).exists()
    if not waiting:
        request_create(RequestInput(runtime=runtime, timeout_seconds=86400, **DEMO_TOOL_REQUEST))
