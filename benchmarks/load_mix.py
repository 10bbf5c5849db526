"""The state benchmarks/load.py seeds and the request mix it sends, with each exact answer.

The expected bodies are written out by hand from the rules in docs/rules.md (S2, S3 for
skills; T5-T11 for tools), not computed by the product's code, so a wrong decision under load
cannot agree with itself.
"""

from __future__ import annotations

import json
from typing import Any

from benchmarks.skill_decisions import rule_specs

PRINCIPAL = "bench-operator"
LOCAL_TOOLS = 300
MCP_TOOLS = 50
RUNTIMES = {  # name: (ceiling, exempt_at_or_below)
    "bench": ("MUTATING", "READ_ONLY"),
    "bench-exempt": ("MUTATING", "MUTATING"),
    "bench-ro": ("READ_ONLY", "READ_ONLY"),
}


def local_tool(i: int) -> dict[str, Any]:
    """tool_000 READ_ONLY/NON_DESTRUCTIVE/IDEMPOTENT, tool_001 MUTATING/DESTRUCTIVE,
    tool_002 MUTATING/NON_DESTRUCTIVE, tool_003 READ_ONLY declared DESTRUCTIVE,
    tool_005 MUTATING/DESTRUCTIVE/IDEMPOTENT, tool_010 MUTATING/NON_DESTRUCTIVE/IDEMPOTENT..."""
    return {
        "name": f"tool_{i:03d}",
        "description": f"Load tool {i}",
        "input_schema": {"type": "object", "properties": {"arg": {"type": "string"}}},
        "side_effect_level": ["READ_ONLY", "MUTATING", "MUTATING"][i % 3],
        "destructive_behavior": "DESTRUCTIVE" if i % 2 else "NON_DESTRUCTIVE",
        "idempotency_behavior": "IDEMPOTENT" if i % 5 == 0 else "NON_IDEMPOTENT",
    }


def seed() -> dict[str, Any]:
    """Runs in a child process with the server's environment; returns the tokens."""
    import django

    django.setup()
    from django.db import transaction

    from aimon_admin.accounts.roles import Role
    from aimon_admin.accounts.services import user_create
    from aimon_admin.approvals.choices import Answer
    from aimon_admin.approvals.rules import rule_create
    from aimon_admin.approvals.services import RequestInput, request_answer, request_create
    from aimon_admin.core.actors import Actor
    from aimon_admin.registry.services import local_tools_replace, mcp_server_create, mcp_tools_record
    from aimon_admin.runtimes.services import runtime_create, token_issue

    actor = Actor.system("benchmark")
    operator = user_create(
        username=PRINCIPAL, password=None, roles=[Role.OPERATOR, Role.APPROVER], actor=actor
    )
    tokens, runtimes = {}, {}
    for name, (ceiling, exempt) in RUNTIMES.items():
        runtime = runtime_create(name=name, actor=actor, ceiling=ceiling, exempt_at_or_below=exempt)
        _, tokens[name] = token_issue(runtime=runtime, actor=actor, label="load")
        local_tools_replace(runtime=runtime, tools=[local_tool(i) for i in range(LOCAL_TOOLS)], actor=actor)
        runtimes[name] = runtime
    bench = runtimes["bench"]
    ignored = mcp_server_create(name="bench-ignore", transport="STDIO", command="true", actor=actor)
    listing = [{"name": f"ign_{i:03d}", "annotations": {"readOnlyHint": True}} for i in range(MCP_TOOLS)]
    mcp_tools_record(server=ignored, listing=listing, actor=actor, complete=True)
    trusted = mcp_server_create(
        name="bench-trust", transport="STDIO", command="true", annotation_trust="TRUST", actor=actor
    )
    listing = [{"name": "tr_ro", "annotations": {"readOnlyHint": True, "destructiveHint": True}}]
    listing.append(
        {
            "name": "tr_nd",
            "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
        }
    )
    listing += [{"name": f"tr_{i:03d}", "annotations": {}} for i in range(MCP_TOOLS - 2)]
    mcp_tools_record(server=trusted, listing=listing, actor=actor, complete=True)
    answers = (
        ("s-bench", None, "deploy-prod", Answer.ALLOW_SESSION),
        ("s-bench", None, "read-secrets", Answer.DENY),
        ("s-bench", "t-1", "run-once", Answer.ALLOW_ONCE),
        ("s-parent", None, "notify-team", Answer.ALLOW_SESSION),
        ("s-agent", None, "publish-docs", Answer.ALLOW_AGENT),
    )
    for session_id, turn_id, skill, answer in answers:
        request, _ = request_create(
            RequestInput(
                runtime=bench, skills=[skill], session_id=session_id, turn_id=turn_id, principal=PRINCIPAL
            )
        )
        request_answer(request=request, user=operator, answer=answer)
    # Rules after the answers: read-secrets is denied for s-bench while read-* allows it.
    with transaction.atomic():
        for pattern, action, own in rule_specs():
            rule_create(pattern=pattern, action=action, actor=actor, runtime=bench if own else None)
    return {"tokens": tokens}


# --- The mix ------------------------------------------------------------------------------------

# (skills, session, invoking session, turn) -> [(decision, source)], from S2 (narrowest layer
# first: turn, session, invoking session, agent, rules, default ASK) and S3 (a fork reads its
# invoking session). Rules: read-* ALLOW; tool-NNNN, team-NNN-*, svcNNN-*-deploy*, *-job-NNN
# by NNN % 3 (ALLOW, DENY, ASK); rt-NNN* likewise, for the bench runtime only.
SKILL_CASES: list[tuple[list[str], str | None, str | None, str | None, list[tuple[str, str]]]] = [
    (
        ["deploy-prod", "notify-team", "read-file"],
        "s-bench",
        "s-parent",
        "t-1",
        [("ALLOW", "SESSION"), ("ALLOW", "INVOKING_SESSION"), ("ALLOW", "RULE")],
    ),
    (["read-secrets"], "s-bench", "s-parent", "t-1", [("DENY", "SESSION")]),  # beats read-* ALLOW
    (["read-secrets"], "s-parent", None, None, [("ALLOW", "RULE")]),  # another session: the rule
    (["run-once"], "s-bench", None, "t-1", [("ALLOW", "TURN")]),
    (["run-once"], "s-bench", None, "t-2", [("ASK", "DEFAULT")]),  # another turn: nothing holds
    (["publish-docs"], "s-bench", "s-parent", "t-1", [("ALLOW", "AGENT")]),
    (["publish-docs"], None, None, None, [("ALLOW", "AGENT")]),
    (["tool-0000"], "s-bench", None, None, [("ALLOW", "RULE")]),
    (["tool-0001"], "s-bench", None, None, [("DENY", "RULE")]),
    (["tool-0002"], "s-parent", None, None, [("ASK", "RULE")]),
    (["team-007-x"], "s-bench", None, None, [("DENY", "RULE")]),
    (["team-008-build"], "s-bench", None, None, [("ASK", "RULE")]),
    (["svc001-a-deploy-x"], "s-bench", None, None, [("DENY", "RULE")]),
    (["nightly-job-003"], None, None, None, [("ALLOW", "RULE")]),
    (["rt-005x"], "s-bench", None, None, [("ASK", "RULE")]),
    (["rt-006"], "s-bench", None, None, [("ALLOW", "RULE")]),
    (["zz-unknown-skill"], "s-bench", "s-parent", "t-1", [("ASK", "DEFAULT")]),
    (["notify-team"], None, "s-parent", None, [("ALLOW", "INVOKING_SESSION")]),  # a fork (S3)
    (["deploy-prod"], None, "s-parent", None, [("ASK", "DEFAULT")]),  # s-bench's grant stays its own
    (["deploy-prod"], "s-parent", None, None, [("ASK", "DEFAULT")]),
    (["notify-team"], "s-bench", None, None, [("ASK", "DEFAULT")]),  # no invoking session named
    (
        ["deploy-prod", "read-secrets", "publish-docs", "tool-0002", "zz-none"],
        "s-bench",
        "s-parent",
        "t-1",
        [("ALLOW", "SESSION"), ("DENY", "SESSION"), ("ALLOW", "AGENT"), ("ASK", "RULE"), ("ASK", "DEFAULT")],
    ),
    (["x" * 200], "s-bench", None, None, [("ASK", "DEFAULT")]),  # the rule index's worst case
    (["read-a", "read-b", "read-c"], "s-bench", None, None, [("ALLOW", "RULE")] * 3),
]

RO, MUT, D, ND, IDEM, NONIDEM = (
    "READ_ONLY",
    "MUTATING",
    "DESTRUCTIVE",
    "NON_DESTRUCTIVE",
    "IDEMPOTENT",
    "NON_IDEMPOTENT",
)
# (runtime, tool, server, attended) -> (decision, reason, level, destructive, idempotency,
# registered), from T5 (READ_ONLY is NON_DESTRUCTIVE), T6-T9 (ceiling, gate, unattended,
# unregistered = MUTATING + DESTRUCTIVE) and T11 (IGNORE: MUTATING + DESTRUCTIVE whatever
# is claimed; TRUST: the hints, READ_ONLY normalised to NON_DESTRUCTIVE).
TOOL_CASES: list[tuple[str, str, str | None, bool, tuple[str, str, str, str, str, bool]]] = [
    ("bench", "tool_000", None, True, ("ALLOW", "READ_ONLY_EXEMPT", RO, ND, IDEM, True)),
    ("bench", "tool_003", None, False, ("ALLOW", "READ_ONLY_EXEMPT", RO, ND, NONIDEM, True)),
    ("bench", "tool_001", None, True, ("ASK", "DESTRUCTIVE_ALWAYS_ASKS", MUT, D, NONIDEM, True)),
    ("bench", "tool_001", None, False, ("DENY", "UNATTENDED_NO_CHANNEL", MUT, D, NONIDEM, True)),
    ("bench", "tool_002", None, True, ("ASK", "NOT_EXEMPT", MUT, ND, NONIDEM, True)),
    ("bench", "tool_002", None, False, ("DENY", "UNATTENDED_NO_CHANNEL", MUT, ND, NONIDEM, True)),
    ("bench", "tool_299", None, True, ("ASK", "DESTRUCTIVE_ALWAYS_ASKS", MUT, D, NONIDEM, True)),
    ("bench", "no_such_tool", None, True, ("ASK", "DESTRUCTIVE_ALWAYS_ASKS", MUT, D, NONIDEM, False)),
    ("bench", "ign_000", "bench-ignore", True, ("ASK", "DESTRUCTIVE_ALWAYS_ASKS", MUT, D, NONIDEM, True)),
    ("bench", "ign_049", "bench-ignore", False, ("DENY", "UNATTENDED_NO_CHANNEL", MUT, D, NONIDEM, True)),
    ("bench", "tr_ro", "bench-trust", False, ("ALLOW", "READ_ONLY_EXEMPT", RO, ND, NONIDEM, True)),
    ("bench", "tr_nd", "bench-trust", True, ("ASK", "NOT_EXEMPT", MUT, ND, IDEM, True)),
    ("bench", "tr_000", "bench-trust", True, ("ASK", "DESTRUCTIVE_ALWAYS_ASKS", MUT, D, NONIDEM, True)),
    ("bench-exempt", "tool_002", None, True, ("ALLOW", "EXEMPT_AT_OR_BELOW", MUT, ND, NONIDEM, True)),
    ("bench-exempt", "tool_010", None, False, ("ALLOW", "EXEMPT_AT_OR_BELOW", MUT, ND, IDEM, True)),
    ("bench-exempt", "tool_005", None, True, ("ASK", "DESTRUCTIVE_ALWAYS_ASKS", MUT, D, IDEM, True)),
    ("bench-exempt", "tool_005", None, False, ("DENY", "UNATTENDED_NO_CHANNEL", MUT, D, IDEM, True)),
    ("bench-exempt", "tr_nd", "bench-trust", False, ("ALLOW", "EXEMPT_AT_OR_BELOW", MUT, ND, IDEM, True)),
    ("bench-exempt", "no_such_tool", None, False, ("DENY", "UNATTENDED_NO_CHANNEL", MUT, D, NONIDEM, False)),
    ("bench-ro", "tool_000", None, True, ("ALLOW", "READ_ONLY_EXEMPT", RO, ND, IDEM, True)),
    ("bench-ro", "tool_001", None, True, ("DENY", "ABOVE_CEILING", MUT, D, NONIDEM, True)),
    ("bench-ro", "tool_002", None, False, ("DENY", "ABOVE_CEILING", MUT, ND, NONIDEM, True)),
    ("bench-ro", "no_such_tool", None, True, ("DENY", "ABOVE_CEILING", MUT, D, NONIDEM, False)),
    ("bench-ro", "ign_001", "bench-ignore", True, ("DENY", "ABOVE_CEILING", MUT, D, NONIDEM, True)),
    ("bench-ro", "tr_ro", "bench-trust", False, ("ALLOW", "READ_ONLY_EXEMPT", RO, ND, NONIDEM, True)),
]


def decision_cases(seeded: dict[str, Any]) -> list[dict[str, Any]]:
    """Skill and tool bodies interleaved, each with its token and exact expected body."""
    tokens = seeded["tokens"]
    skills = []
    for names, session, invoking, turn, verdicts in SKILL_CASES:
        body = {"skills": names, "session_id": session, "invoking_session_id": invoking, "turn_id": turn}
        if session:
            body["principal"] = PRINCIPAL
        expected = {
            "decisions": [
                {"skill": name, "decision": d, "source": s}
                for name, (d, s) in zip(names, verdicts, strict=True)
            ]
        }
        skills.append(
            {
                "path": "/api/v1/skill-decisions",
                "token": tokens["bench"],
                "body": json.dumps(body),
                "expected": expected,
            }
        )
    tools = []
    for runtime, tool, server, attended, answer in TOOL_CASES:
        body = {"tool": tool, "server": server, "session_id": "s-tools" if attended else None}
        keys = (
            "decision",
            "reason",
            "side_effect_level",
            "destructive_behavior",
            "idempotency_behavior",
            "registered",
        )
        tools.append(
            {
                "path": "/api/v1/tool-decisions",
                "token": tokens[runtime],
                "body": json.dumps(body),
                # The ceiling's own refusal names it; every other answer here is the gate's.
                "expected": dict(
                    zip(keys, answer, strict=True),
                    source="CEILING" if answer[1] == "ABOVE_CEILING" else "GATE",
                ),
            }
        )
    mixed = []
    for i in range(max(len(skills), len(tools))):
        mixed += [skills[i % len(skills)], tools[i % len(tools)]]
    return mixed


def baseline_cases(seeded: dict[str, Any]) -> list[dict[str, Any]]:
    """The bare endpoint: the same token lookup, a small JSON body."""
    return [
        {
            "path": "/bench/baseline",
            "token": seeded["tokens"][name],
            "body": "{}",
            "expected": {"runtime": name, "decision": "ALLOW"},
        }
        for name in RUNTIMES
    ]
