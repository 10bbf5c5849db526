"""The Claude Code hook (G3): the installed `aimon-claude-hook` run as Claude Code runs it, a
subprocess fed recorded payloads of the documented PreToolUse shape on standard input,
against the real product over HTTP. Every run must exit 0 with standard output valid against
the documented hook output schema, and never a traceback."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from aimon_client import Client, claude_hook
from aimon_client.errors import NOT_AUTHORIZED
from aimon_client.results import ToolRequest

from aimon_admin.accounts.models import User
from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import Answer, RequestStatus
from aimon_admin.approvals.models import ApprovalRequest, ToolRule
from tests.clients.conftest import ANSWERED_WHILE_WAITING, answer, run
from tests.ports import free_port

pytestmark = pytest.mark.usefixtures("catalog")

HOOK = shutil.which("aimon-claude-hook", path=str(Path(sys.executable).parent))

# The hook's output as Claude Code documents it for PreToolUse: the decision inside
# hookSpecificOutput, beside the optional fields every hook may print.
OUTPUT_SCHEMA = {
    "type": "object",
    "required": ["hookSpecificOutput"],
    "additionalProperties": False,
    "properties": {
        "continue": {"type": "boolean"},
        "stopReason": {"type": "string"},
        "suppressOutput": {"type": "boolean"},
        "systemMessage": {"type": "string"},
        "hookSpecificOutput": {
            "type": "object",
            "required": ["hookEventName", "permissionDecision", "permissionDecisionReason"],
            "additionalProperties": False,
            "properties": {
                "hookEventName": {"const": "PreToolUse"},
                "permissionDecision": {"enum": ["allow", "deny", "ask"]},
                "permissionDecisionReason": {"type": "string", "minLength": 1},
            },
        },
    },
}


def payload(tool_name: str, tool_input: Any, session_id: str = "cc-session-1") -> dict[str, Any]:
    """A PreToolUse input as Claude Code sends it."""
    return {
        "session_id": session_id,
        "transcript_path": f"/home/alice/.claude/projects/demo/{session_id}.jsonl",
        "cwd": "/home/alice/demo",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool_name,
        "tool_input": tool_input,
        "tool_use_id": "toolu_01ABCDEF",
    }


BASH = payload("Bash", {"command": "git push origin main", "description": "Push the branch"})
EDIT = payload("Edit", {"file_path": "/home/alice/demo/app.py", "old_string": "a = 1", "new_string": "a = 2"})
READ = payload("Read", {"file_path": "/home/alice/demo/README.md"})
MCP_STATUS = payload("mcp__git__git_status", {"repo_path": "/home/alice/demo"})
MCP_RESET = payload("mcp__git__git_reset", {"repo_path": "/home/alice/demo"})
UNKNOWN = payload("WebFetch", {"url": "https://example.org", "prompt": "summarise"})


def environment(product: str, token: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIMON_")}
    env.update({"AIMON_URL": product, "AIMON_TOKEN": token, "AIMON_PRINCIPAL": "alice"})
    env.update(extra)
    return env


def start(stdin: str | bytes, env: dict[str, str]) -> subprocess.Popen[bytes]:
    assert HOOK is not None, "aimon-claude-hook is not installed in this environment"
    process = subprocess.Popen(
        [HOOK], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert process.stdin is not None
    process.stdin.write(stdin if isinstance(stdin, bytes) else stdin.encode())
    process.stdin.close()
    return process


def finish(process: subprocess.Popen[bytes]) -> tuple[str, str]:
    """The verdict and its reason, after checking what Claude Code relies on: exit 0, one
    JSON object of the documented shape, no traceback."""
    assert process.stdout is not None
    assert process.stderr is not None
    out, err = process.stdout.read(), process.stderr.read()
    assert process.wait(timeout=120) == 0
    assert b"Traceback" not in err, err.decode()
    output = json.loads(out)
    jsonschema.validate(output, OUTPUT_SCHEMA)
    specific = output["hookSpecificOutput"]
    return specific["permissionDecision"], specific["permissionDecisionReason"]


def hook(stdin: Any, env: dict[str, str]) -> tuple[str, str]:
    raw = stdin if isinstance(stdin, (str, bytes)) else json.dumps(stdin)
    return finish(start(raw, env))


def opened_request(process: subprocess.Popen[bytes], session_id: str, tool: str) -> ApprovalRequest:
    """The tool request the running hook opened, once it has (polled: the hook is another
    process); the hook's verdict instead if it ended without opening one."""
    deadline = time.monotonic() + 120  # generous: a loaded machine starts Python slowly
    while time.monotonic() < deadline:
        found = ApprovalRequest.objects.filter(session__session_id=session_id, tool=tool).first()
        if found is not None:
            return found
        if process.poll() is not None:
            raise AssertionError(f"the hook ended without opening a request: {finish(process)}")
        time.sleep(0.05)
    raise AssertionError(f"the hook opened no request for {tool} in {session_id}")


# --- Decided without a person ---------------------------------------------------------------


@pytest.mark.parametrize(("call", "why"), [(READ, "read-only"), (MCP_STATUS, "read-only")])
def test_a_read_only_call_is_allowed(product: str, runtime_token: str, call: dict, why: str) -> None:
    # G3, T8: a read-only tool never asks; the MCP tool maps to the server's tool.
    decision, reason = hook(call, environment(product, runtime_token))
    assert decision == "allow"
    assert reason == claude_hook.ALLOWED.format(words="the tool is read-only and never asks")


def test_a_call_a_rule_denies_is_denied_with_the_rule(product: str, runtime_token: str) -> None:
    # G3, U5: an operator's DENY rule on Bash(git push:*) refuses the call, naming the rule.
    ToolRule.objects.create(tool="Bash", pattern="git push:*", action="DENY")
    rules.rule_index_reset()
    decision, reason = hook(BASH, environment(product, runtime_token))
    assert decision == "deny"
    assert reason.startswith("AIMON Admin denies this call: an operator's rule denies it")
    assert "Bash(git push:*)" in reason


# --- Asking a person ------------------------------------------------------------------------


@ANSWERED_WHILE_WAITING
def test_bash_asks_a_person_who_allows_this_call_then_the_same_call_asks_again(
    product: str, runtime_token: str, approver: User
) -> None:
    # G3, U1-U4: Bash is destructive (T8), so the hook opens a request with the command as its
    # subject; the person's Allow this call lets exactly this call run, once.
    env = environment(product, runtime_token)
    process = start(json.dumps(BASH), env)
    request = opened_request(process, "cc-session-1", "Bash")
    assert request.subject == "git push origin main"
    assert request.reason == "Claude Code wants to run Bash: git push origin main in /home/alice/demo."
    answer(str(request.pk), approver, Answer.ALLOW_CALL)
    assert finish(process) == ("allow", claude_hook.ALLOWED_BY_PERSON.format(who="alice"))

    # The same call again: that answer is spent, so it asks again; nobody answers in 1 s.
    decision, reason = hook(BASH, environment(product, runtime_token, AIMON_HOOK_WAIT_SECONDS="1"))
    assert (decision, reason) == ("deny", claude_hook.NO_ANSWER_DENY.format(seconds=1))
    second = ApprovalRequest.objects.exclude(pk=request.pk).get(tool="Bash")
    assert second.status == RequestStatus.CANCELLED  # S9: the hook cancelled what it stopped waiting for


@ANSWERED_WHILE_WAITING
def test_edit_asks_and_a_person_denies(product: str, runtime_token: str, approver: User) -> None:
    # G3, U1: the file tool's subject is its file_path; a Deny denies, naming who.
    process = start(json.dumps(EDIT), environment(product, runtime_token))
    request = opened_request(process, "cc-session-1", "Edit")
    assert request.subject == "/home/alice/demo/app.py"
    answer(str(request.pk), approver, Answer.DENY)
    assert finish(process) == ("deny", claude_hook.DENIED_BY_PERSON.format(who="alice"))


@ANSWERED_WHILE_WAITING
def test_a_destructive_mcp_tool_asks_for_that_servers_tool(
    product: str, runtime_token: str, approver: User
) -> None:
    # G3: mcp__git__git_reset is the git server's git_reset, asked about with its arguments.
    process = start(json.dumps(MCP_RESET), environment(product, runtime_token))
    request = opened_request(process, "cc-session-1", "git_reset")
    assert request.server == "git"
    answer(str(request.pk), approver, Answer.ALLOW_CALL)
    assert finish(process) == ("allow", claude_hook.ALLOWED_BY_PERSON.format(who="alice"))


def test_an_unknown_tool_is_an_unregistered_tool_that_asks(product: str, runtime_token: str) -> None:
    # G3, T9: a tool nobody registered is MUTATING + DESTRUCTIVE, so it asks; with
    # AIMON_HOOK_NO_ANSWER=ask an unanswered call goes to the person at the terminal.
    env = environment(product, runtime_token, AIMON_HOOK_WAIT_SECONDS="0", AIMON_HOOK_NO_ANSWER="ask")
    decision, reason = hook(UNKNOWN, env)
    assert (decision, reason) == ("ask", claude_hook.NO_ANSWER_ASK.format(seconds=0))
    request = ApprovalRequest.objects.get(tool="WebFetch")
    assert request.server == ""
    assert request.status == RequestStatus.CANCELLED


@ANSWERED_WHILE_WAITING
def test_an_allow_is_confirmed_for_exactly_these_arguments(
    product: str, runtime_token: str, approver: User
) -> None:
    # U4: an answer that allows counts only when the product, asked again with the request's
    # id, allows this very call; for other arguments it does not, and the hook denies.
    async def opened(client: Client) -> ToolRequest:
        return await client.open_tool_request(
            "Bash", arguments=BASH["tool_input"], session_id="cc-session-1", principal="alice"
        )

    request = run(product, runtime_token, opened)
    answer(request.id, approver, Answer.ALLOW_CALL)
    changed = claude_hook.call_from(json.dumps({**BASH, "tool_input": {"command": "git push --force"}}))
    ask = {"server": None, "session_id": "cc-session-1", "principal": "alice"}

    async def judged(client: Client) -> claude_hook.Verdict:
        answered = await client.wait_tool_request(request.id, timeout=0)
        return await claude_hook.answered(changed, answered, ask, client)

    verdict = run(product, runtime_token, judged)
    assert verdict.decision == "deny"
    assert verdict.reason.startswith(
        "alice answered in AIMON Admin, but the product does not allow this exact"
    )


# --- Failing closed ---------------------------------------------------------------------------


def test_the_product_down_denies_with_the_reason(runtime_token: str) -> None:
    # G3 fails closed: nothing listens at the address, so nothing runs.
    decision, reason = hook(BASH, environment(f"http://127.0.0.1:{free_port()}", runtime_token))
    assert decision == "deny"
    assert "could not be reached" in reason


def test_a_wrong_token_denies_saying_where_to_get_one(product: str) -> None:
    decision, reason = hook(READ, environment(product, "not-a-token"))
    assert decision == "deny"
    assert reason.startswith(NOT_AUTHORIZED.split("(")[0])


@pytest.mark.parametrize(
    ("stdin", "expected"),
    [
        (b"{not json", "The hook's input is not JSON"),
        (b"", "The hook's input is not JSON"),
        (b"\xff\xfe", "The hook's input is not JSON"),
        (b"[1, 2]", claude_hook.NOT_AN_OBJECT),
        (json.dumps({**BASH, "tool_input": "rm -rf /"}), "`tool_input` missing or not a JSON object"),
        (json.dumps({**BASH, "tool_input": None}), "`tool_input` missing or not a JSON object"),
        (json.dumps({k: v for k, v in BASH.items() if k != "tool_name"}), "`tool_name` missing"),
        (json.dumps({**BASH, "session_id": 7}), "`session_id` missing or not a non-empty string"),
        (json.dumps({**BASH, "hook_event_name": "PostToolUse"}), "handles PreToolUse only"),
    ],
)
def test_bad_input_denies_naming_what_is_wrong(
    product: str, runtime_token: str, stdin: str | bytes, expected: str
) -> None:
    # G3: malformed hook JSON or a tool_input that is not an object is a refusal in words.
    decision, reason = hook(stdin, environment(product, runtime_token))
    assert decision == "deny"
    assert expected in reason
    assert not ApprovalRequest.objects.exists()


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"AIMON_URL": ""}, "AIMON_URL is not set"),
        ({"AIMON_TOKEN": ""}, "AIMON_TOKEN is not set"),
        ({"AIMON_HOOK_WAIT_SECONDS": "soon"}, "AIMON_HOOK_WAIT_SECONDS is 'soon'"),
        ({"AIMON_HOOK_NO_ANSWER": "allow"}, "AIMON_HOOK_NO_ANSWER is 'allow', not one of deny, ask"),
    ],
)
def test_a_bad_setting_denies_naming_the_variable(
    product: str, runtime_token: str, extra: dict[str, str], expected: str
) -> None:
    decision, reason = hook(READ, environment(product, runtime_token, **extra))
    assert decision == "deny"
    assert expected in reason


def test_an_arguments_body_the_product_refuses_is_a_deny_naming_the_field(
    product: str, runtime_token: str
) -> None:
    # G3: a tool_input over the product's 64 KiB limit is refused by the product (400), and
    # the hook says so rather than guessing.
    big = payload("Write", {"file_path": "/home/alice/demo/big.txt", "content": "x" * 70_000})
    decision, reason = hook(big, environment(product, runtime_token))
    assert decision == "deny"
    assert "arguments" in reason


def test_an_unexpected_failure_is_still_a_deny_in_valid_json(monkeypatch: pytest.MonkeyPatch) -> None:
    # G3: even an error nobody foresaw denies, as JSON, exit 0. (In process: the failure is
    # provoked by an environment mapping that breaks when read.)
    class Broken(dict):
        def get(self, *args: Any) -> Any:
            raise RuntimeError("the environment cannot be read")

    verdict = asyncio.run(claude_hook.verdict_for(json.dumps(READ), Broken()))
    assert verdict.decision == "deny"
    assert verdict.reason == claude_hook.UNEXPECTED.format(
        error="RuntimeError: the environment cannot be read"
    )
    jsonschema.validate(verdict.output(), OUTPUT_SCHEMA)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mcp__git__git_status", ("git", "git_status")),
        ("mcp__my-server__tool__with__underscores", ("my-server", "tool__with__underscores")),
        ("mcp__nameless", (None, "mcp__nameless")),
        ("mcp____tool", (None, "mcp____tool")),
        ("Bash", (None, "Bash")),
        ("NotebookEdit", (None, "NotebookEdit")),
    ],
)
def test_tool_names_map_to_the_products_tools(name: str, expected: tuple[str | None, str]) -> None:
    # G3: mcp__<server>__<tool> is that server's tool; anything else is a local tool by name.
    assert claude_hook.tool_of(name) == expected
