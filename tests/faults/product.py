"""Set-up and checks run inside the product, against the fault tests' private servers.

    python -m tests.faults.product COMMAND '{"argument": ...}'

Run by `conftest.Product.run` with the product's environment (DATABASE_URL and REDIS_URL
of the private servers); prints one line of JSON. Everything goes through the product's
own services, as an operator's commands would.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import django

PASSWORD = "correct horse battery staple 42"


def people(*, tag: str) -> dict[str, Any]:
    """An operator, an approver, an auditor and a runtime with a token, all named after `tag`."""
    from aimon_admin.accounts.roles import Role
    from aimon_admin.accounts.services import user_create
    from aimon_admin.core.actors import Actor
    from aimon_admin.runtimes.services import runtime_create, token_issue

    actor = Actor.system("faults")
    names = {role: f"{role}-{tag}" for role in ("operator", "approver", "auditor")}
    user_create(username=names["operator"], password=PASSWORD, roles=[Role.OPERATOR], actor=actor)
    user_create(username=names["approver"], password=PASSWORD, roles=[Role.APPROVER], actor=actor)
    user_create(username=names["auditor"], password=PASSWORD, roles=[Role.AUDITOR], actor=actor)
    runtime = runtime_create(name=f"agent-{tag}", actor=actor)
    token = token_issue(runtime=runtime, actor=actor, label="faults")[1]
    return {**names, "password": PASSWORD, "runtime": runtime.name, "runtime_id": runtime.pk, "token": token}


def chain() -> dict[str, Any]:
    """A2: walk the whole audit chain; how many events, and the first problem if any."""
    from aimon_admin.audit.services import audit_verify_chain

    count, problem = audit_verify_chain()
    return {"events": count, "problem": None if problem is None else str(problem)}


def people_and_server(
    *, tag: str, name: str, args: list[str], env: dict[str, str], queue_sync: bool = True
) -> dict[str, Any]:
    """`people`, plus a trusted stdio MCP server run by this Python (T11), and (`queue_sync`)
    its first sync queued as the operator's button queues it: the task goes to the broker
    on commit."""
    from aimon_admin.accounts.models import User
    from aimon_admin.core.actors import Actor
    from aimon_admin.registry.choices import AnnotationTrust, McpTransport
    from aimon_admin.registry.services import mcp_server_create

    who = people(tag=tag)
    operator = Actor.for_user(User.objects.get(username=who["operator"]))
    server = mcp_server_create(
        name=name,
        actor=operator,
        annotation_trust=AnnotationTrust.TRUST,
        transport=McpTransport.STDIO,
        command=sys.executable,
        args=args,
        env=env,
        timeout_seconds=60,
    )
    run_id = sync(name=name, operator=who["operator"])["run_id"] if queue_sync else None
    return {**who, "server_id": server.pk, "run_id": run_id}


def sync(*, name: str, operator: str) -> dict[str, Any]:
    """Queue a sync as the operator's button does: the task goes to the broker on commit."""
    from django.db import transaction

    from aimon_admin.accounts.models import User
    from aimon_admin.core.actors import Actor
    from aimon_admin.registry.models import McpServer
    from aimon_admin.registry.services import mcp_sync_request

    with transaction.atomic():
        run = mcp_sync_request(
            server=McpServer.objects.get(name=name), actor=Actor.for_user(User.objects.get(username=operator))
        )
    return {"run_id": run.pk}


def sync_or_refusal(*, name: str, operator: str) -> dict[str, Any]:
    """*Sync now*, as `sync`, but a refusal is an answer too: {"refused": the message}."""
    from aimon_admin.registry.services import RegistryError

    try:
        return sync(name=name, operator=operator)
    except RegistryError as exc:
        return {"refused": str(exc)}


def webhook(*, name: str, url: str) -> dict[str, Any]:
    """An operator's signed webhook taking every request event; its secret, shown once."""
    from aimon_admin.core.actors import Actor
    from aimon_admin.notifications.services import webhook_create

    hook, secret = webhook_create(name=name, url=url, actor=Actor.system("faults"))
    return {"id": hook.pk, "secret": secret}


def sweep() -> dict[str, Any]:
    """Beat's notification sweep, once, as beat runs it (what it queues goes to the broker)."""
    from aimon_admin.notifications.tasks import sweep as notifications_sweep

    return notifications_sweep()


COMMANDS = {
    "people": people,
    "chain": chain,
    "people_and_server": people_and_server,
    "sync": sync,
    "sync_or_refusal": sync_or_refusal,
    "webhook": webhook,
    "sweep": sweep,
}


def main() -> None:
    django.setup()
    command = COMMANDS[sys.argv[1]]
    arguments = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    print(json.dumps(command(**arguments)))


if __name__ == "__main__":
    main()
