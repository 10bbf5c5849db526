"""`aimon-claude-hook`: Claude Code's `PreToolUse` hook, governed by AIMON Admin (G3).

Claude Code runs it before every tool call with the documented hook JSON on standard input
(`session_id`, `transcript_path`, `cwd`, `hook_event_name`, `tool_name`, `tool_input`,
`tool_use_id`). It asks the product about the call with its exact input and prints the
documented answer on standard output, exit status 0:

    {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                            "permissionDecision": "allow" | "deny" | "ask",
                            "permissionDecisionReason": "<why, in words>"}}

Tools map to the product's as it knows them: `mcp__<server>__<tool>` is that server's tool;
every other name (Bash, Edit, Write, Read, …) is a tool of this runtime's own, whose subject
argument the product reads from `tool_input` (U1: Bash's `command`, the file tools'
`file_path`); a tool nobody registered counts as MUTATING + DESTRUCTIVE (T9).

ALLOW allows, DENY denies. ASK opens a tool approval request (the person is notified, P1,
and may answer from a phone) and waits up to AIMON_HOOK_WAIT_SECONDS; on an answer that
allows, the product is asked again with the request's id and only its ALLOW allows (U4). A
deny, an expiry or a cancel denies; no answer in time cancels the request (S9) and denies,
or with AIMON_HOOK_NO_ANSWER=ask hands the call to the person at the terminal.

Fails closed: anything that goes wrong (the product unreachable or failing, a wrong token,
an answer not understood, input that is not the documented JSON, or any unexpected error)
denies the call with the reason in words, still as valid JSON with exit status 0, so the
agent's screen never shows a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from aimon_client import __version__
from aimon_client.client import Client
from aimon_client.errors import AimonError
from aimon_client.results import Decision, Status, ToolDecision, ToolRequest

USER_AGENT = f"aimon-claude-hook/{__version__}"
EVENT = "PreToolUse"

ENV_URL = "AIMON_URL"
ENV_TOKEN = "AIMON_TOKEN"  # noqa: S105 - the name of the variable, not a token
ENV_PRINCIPAL = "AIMON_PRINCIPAL"
ENV_WAIT = "AIMON_HOOK_WAIT_SECONDS"
ENV_NO_ANSWER = "AIMON_HOOK_NO_ANSWER"
DEFAULT_WAIT_SECONDS = 50  # below the 60 s hook timeout the documented settings give
MAX_WAIT_SECONDS = 86_400
NO_ANSWER_CHOICES = ("deny", "ask")
REQUEST_SLACK_SECONDS = 30  # the request outlives the wait by this, so the hook cancels it first
MCP_PREFIX = "mcp__"

# What the hook says, each a sentence the agent (and whoever reads its log) can act on.
ALLOWED = "AIMON Admin allows this call: {words}."
DENIED = "AIMON Admin denies this call: {words}."
ALLOWED_BY_PERSON = "{who} allowed this call in AIMON Admin."
DENIED_BY_PERSON = "{who} denied this call in AIMON Admin."
NOT_CONFIRMED = (
    "{who} answered in AIMON Admin, but the product does not allow this exact call ({words}); "
    "the call is refused."
)
EXPIRED = "Nobody answered the approval request in AIMON Admin before it expired; the call is refused."
CANCELLED = "The approval request was cancelled in AIMON Admin; the call is refused."
NO_ANSWER_DENY = (
    "Nobody answered the approval request in AIMON Admin within {seconds} s; the request was "
    "cancelled and the call is refused. Try again when an approver can answer."
)
NO_ANSWER_ASK = (
    "Nobody answered the approval request in AIMON Admin within {seconds} s; a person at this "
    "terminal must decide whether this call runs."
)
REQUEST_REASON = "Claude Code wants to run {call}{where}."
NOT_JSON = "The hook's input is not JSON ({detail}); the call is refused."
NOT_AN_OBJECT = "The hook's input is not a JSON object; the call is refused."
BAD_FIELD = "The hook's input has `{field}` missing or not {expected}; the call is refused."
WRONG_EVENT = (
    "aimon-claude-hook handles PreToolUse only, but was run for {event}; the call is refused. "
    "Configure it under hooks.PreToolUse in Claude Code's settings."
)
NOT_CONFIGURED = (
    "{name} is not set, so AIMON Admin cannot be asked and the call is refused. Set {url} to the "
    "product's address and {token} to this runtime's token (an operator issues one on the "
    "runtime's page in AIMON Admin)."
)
BAD_WAIT = "{name} is {value!r}, not a whole number of seconds from 0 to {most}; the call is refused."
BAD_NO_ANSWER = "{name} is {value!r}, not one of {choices}; the call is refused."
UNEXPECTED = "The AIMON Admin hook failed unexpectedly ({error}); the call is refused."

SUBJECT_SHOWN = 300  # characters of the call shown in the request's reason


class HookInputError(ValueError):
    """The hook's input or configuration is unusable; the message is the reason to deny with."""


@dataclass(frozen=True)
class Verdict:
    """What the hook answers Claude Code: allow, deny or ask, and why."""

    decision: str
    reason: str

    def output(self) -> dict[str, Any]:
        return {
            "hookSpecificOutput": {
                "hookEventName": EVENT,
                "permissionDecision": self.decision,
                "permissionDecisionReason": self.reason,
            }
        }


def allow(reason: str) -> Verdict:
    return Verdict("allow", reason)


def deny(reason: str) -> Verdict:
    return Verdict("deny", reason)


@dataclass(frozen=True)
class Call:
    """One tool call as the product knows it (G3's mapping)."""

    tool: str
    server: str | None
    arguments: dict[str, Any]
    session_id: str | None
    cwd: str | None

    def shown(self) -> str:
        name = f"{self.server}/{self.tool}" if self.server else self.tool
        subject = self.arguments.get("command") or self.arguments.get("file_path")
        if not isinstance(subject, str):
            subject = json.dumps(self.arguments, ensure_ascii=False, sort_keys=True)
        if len(subject) > SUBJECT_SHOWN:
            subject = subject[: SUBJECT_SHOWN - 1] + "…"
        return f"{name}: {subject}"


@dataclass(frozen=True)
class Settings:
    url: str
    token: str
    principal: str | None
    wait_seconds: int
    no_answer: str


def tool_of(name: str) -> tuple[str | None, str]:
    """(server, tool) for a Claude Code tool name: `mcp__<server>__<tool>` names a registered
    MCP server's tool; any other name is a tool of the runtime's own."""
    if name.startswith(MCP_PREFIX):
        server, _, tool = name[len(MCP_PREFIX) :].partition("__")
        if server and tool:
            return server, tool
    return None, name


def call_from(raw: str | bytes) -> Call:
    """The call in the hook's input, or HookInputError saying what is wrong with it."""
    try:
        payload = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HookInputError(NOT_JSON.format(detail=exc)) from exc
    if not isinstance(payload, dict):
        raise HookInputError(NOT_AN_OBJECT)
    event = payload.get("hook_event_name", EVENT)
    if event != EVENT:
        raise HookInputError(WRONG_EVENT.format(event=json.dumps(event)))
    name = payload.get("tool_name")
    if not isinstance(name, str) or not name:
        raise HookInputError(BAD_FIELD.format(field="tool_name", expected="a non-empty string"))
    arguments = payload.get("tool_input")
    if not isinstance(arguments, dict):
        raise HookInputError(BAD_FIELD.format(field="tool_input", expected="a JSON object"))
    session_id = payload.get("session_id")
    if session_id is not None and (not isinstance(session_id, str) or not session_id):
        raise HookInputError(BAD_FIELD.format(field="session_id", expected="a non-empty string"))
    cwd = payload.get("cwd")
    server, tool = tool_of(name)
    return Call(tool, server, arguments, session_id, cwd if isinstance(cwd, str) else None)


def settings_from(environ: dict[str, str] | os._Environ[str]) -> Settings:
    """The hook's settings from its environment, or HookInputError naming the variable."""
    url, token = environ.get(ENV_URL, "").strip(), environ.get(ENV_TOKEN, "").strip()
    for name, value in ((ENV_URL, url), (ENV_TOKEN, token)):
        if not value:
            raise HookInputError(NOT_CONFIGURED.format(name=name, url=ENV_URL, token=ENV_TOKEN))
    raw_wait = environ.get(ENV_WAIT, "").strip() or str(DEFAULT_WAIT_SECONDS)
    if not raw_wait.isascii() or not raw_wait.isdigit() or int(raw_wait) > MAX_WAIT_SECONDS:
        raise HookInputError(BAD_WAIT.format(name=ENV_WAIT, value=raw_wait, most=MAX_WAIT_SECONDS))
    no_answer = environ.get(ENV_NO_ANSWER, "").strip() or NO_ANSWER_CHOICES[0]
    if no_answer not in NO_ANSWER_CHOICES:
        raise HookInputError(
            BAD_NO_ANSWER.format(name=ENV_NO_ANSWER, value=no_answer, choices=", ".join(NO_ANSWER_CHOICES))
        )
    principal = environ.get(ENV_PRINCIPAL, "").strip() or None
    return Settings(url, token, principal, int(raw_wait), no_answer)


async def decide(call: Call, settings: Settings, client: Client) -> Verdict:
    """Ask the product about `call`, and a person when it says ASK (G3)."""
    ask = {"server": call.server, "session_id": call.session_id, "principal": settings.principal}
    decided = await client.tool_decision(call.tool, arguments=call.arguments, **ask)
    if decided.decision == Decision.ALLOW:
        return allow(ALLOWED.format(words=decided.in_words()))
    if decided.decision == Decision.DENY:
        return deny(DENIED.format(words=decided.in_words()))
    where = f" in {call.cwd}" if call.cwd else ""
    request = await client.open_tool_request(
        call.tool,
        arguments=call.arguments,
        reason=REQUEST_REASON.format(call=call.shown(), where=where),
        timeout_seconds=settings.wait_seconds + REQUEST_SLACK_SECONDS,
        **ask,
    )
    if request.pending:
        request = await client.wait_tool_request(request.id, timeout=settings.wait_seconds)
    if request.pending:
        # S9: no answer in time. The request is cancelled so it does not go on asking for a
        # call that is no longer waiting; an answer that arrived meanwhile is read back.
        request = await client.cancel_tool_request(request.id)
        if request.status == Status.CANCELLED:
            if settings.no_answer == "ask":
                return Verdict("ask", NO_ANSWER_ASK.format(seconds=settings.wait_seconds))
            return deny(NO_ANSWER_DENY.format(seconds=settings.wait_seconds))
    return await answered(call, request, ask, client)


async def answered(call: Call, request: ToolRequest, ask: dict[str, Any], client: Client) -> Verdict:
    """The verdict for a request that is no longer PENDING."""
    who = request.answered_by or "A person"
    if request.status == Status.EXPIRED:
        return deny(EXPIRED)
    if request.status == Status.CANCELLED:
        return deny(CANCELLED)
    if request.decision != Decision.ALLOW:
        if request.answered_by is None and request.source is not None:  # the chain decided at opening
            return deny(DENIED.format(words="the product's rules deny it"))
        return deny(DENIED_BY_PERSON.format(who=who))
    # U4: an answer that allows is confirmed by the product for exactly these arguments.
    again: ToolDecision = await client.tool_decision(
        call.tool, arguments=call.arguments, approval_id=request.id, **ask
    )
    if again.decision != Decision.ALLOW:
        return deny(NOT_CONFIRMED.format(who=who, words=again.in_words()))
    if request.answered_by is None:
        return allow(ALLOWED.format(words=again.in_words()))
    return allow(ALLOWED_BY_PERSON.format(who=who))


async def verdict_for(raw: str | bytes, environ: dict[str, str] | os._Environ[str]) -> Verdict:
    """The whole hook, from its input to its verdict; every failure is a deny in words."""
    try:
        call = call_from(raw)
        settings = settings_from(environ)
        async with Client(
            settings.url, settings.token, user_agent=USER_AGENT, timeout=5.0, retries=2
        ) as client:
            return await decide(call, settings, client)
    except HookInputError as exc:
        return deny(str(exc))
    except AimonError as exc:
        return deny(exc.reason)
    except Exception as exc:  # fail closed: never a traceback on the agent's screen
        return deny(UNEXPECTED.format(error=f"{type(exc).__name__}: {exc}"))


def main(stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """The console script: read the hook JSON, print the verdict, exit 0."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    try:
        raw = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read()
        verdict = asyncio.run(verdict_for(raw, os.environ))
    except Exception as exc:  # reading stdin or starting the loop failed: still a deny
        verdict = deny(UNEXPECTED.format(error=f"{type(exc).__name__}: {exc}"))
    stdout.write(json.dumps(verdict.output(), ensure_ascii=False) + "\n")
    stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
