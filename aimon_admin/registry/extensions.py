"""What an app above the registry tells registry pages, without the registry importing it
(tests/test_layers.py): the app registers a provider when it is ready; until one does,
the answer is empty.

`unattended_rules`: the operator's ALLOW rules that answer a runtime's unattended calls
instead of the gate's refusal (DESIGN U5: pre-approvals, and plain ALLOW rules, which
answer attended and unattended calls alike), by (server, tool). approvals registers it
(approvals/apps.py); the gate simulator and the worklist's forecast read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from aimon_admin.runtimes.models import AgentRuntime


@dataclass(frozen=True)
class AllowRule:
    """An ALLOW rule as the gate pages show it: its `Tool(pattern)` text, whether it is a
    pre-approval (only this runtime's unattended runs), and whether it stands for every
    call of its tool (no pattern, or only wildcards) or only calls its pattern matches. A
    rule for every call of a destructive tool answers none (U3, U5: never wholesale)."""

    text: str
    pre_approval: bool
    every_call: bool


UnattendedRules = Callable[[AgentRuntime], Mapping[tuple[str, str], Sequence[AllowRule]]]

_providers: dict[str, UnattendedRules] = {}


def provide_unattended_rules(provider: UnattendedRules) -> None:
    _providers["unattended_rules"] = provider


def unattended_rules(runtime: AgentRuntime) -> Mapping[tuple[str, str], Sequence[AllowRule]]:
    """By (server, tool) ("" for a runtime's own tool): the ALLOW rules that apply to this
    runtime's unattended calls; empty when no app provides them."""
    provider = _providers.get("unattended_rules")
    return provider(runtime) if provider is not None else {}
