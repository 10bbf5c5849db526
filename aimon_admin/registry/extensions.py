"""What an app above the registry tells registry pages, without the registry importing it
(tests/test_layers.py): the app registers a provider when it is ready; until one does,
the answer is empty.

`unattended_rules`: the operator's ALLOW rules that answer a runtime's unattended calls
instead of the gate's refusal (U5: pre-approvals, and plain ALLOW rules, which answer
attended and unattended calls alike), by (server, tool). approvals registers it
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


RulesByTool = Mapping[tuple[str, str], Sequence[AllowRule]]
UnattendedRules = Callable[[AgentRuntime], RulesByTool]
UnattendedRulesMany = Callable[[Sequence[AgentRuntime]], Mapping[int, RulesByTool]]

_providers: dict[str, UnattendedRules] = {}
_many_providers: dict[str, UnattendedRulesMany] = {}


def provide_unattended_rules(provider: UnattendedRules, many: UnattendedRulesMany | None = None) -> None:
    """`provider` answers for one runtime; `many`, if given, for several at once (the home's
    forecast reads every runtime's: one query instead of one per runtime)."""
    _providers["unattended_rules"] = provider
    if many is not None:
        _many_providers["unattended_rules"] = many


def unattended_rules(runtime: AgentRuntime) -> RulesByTool:
    """By (server, tool) ("" for a runtime's own tool): the ALLOW rules that apply to this
    runtime's unattended calls; empty when no app provides them."""
    provider = _providers.get("unattended_rules")
    return provider(runtime) if provider is not None else {}


def unattended_rules_many(runtimes: Sequence[AgentRuntime]) -> Mapping[int, RulesByTool]:
    """`unattended_rules` of each runtime, by its primary key."""
    many = _many_providers.get("unattended_rules")
    if many is not None:
        return many(runtimes)
    return {runtime.pk: unattended_rules(runtime) for runtime in runtimes}
