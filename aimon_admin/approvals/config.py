"""`load_config`'s rule sections: toolRules (U1, U5) and skillRules, read with the registry's
configuration parser (every error at FILE:LINE, the whole file checked before anything is
written) and applied in the same transaction as its servers and tool subjects
(registry/config.py), all or nothing.

Format::

    toolRules:
      - {pattern: "Bash(rm:*)", action: DENY}                  # every runtime
      - {pattern: "Bash(git status:*)", action: ALLOW, runtime: nightly, unattended: true}
      - {pattern: "Bash(git push:*)", action: ASK, approvers: 2}
    skillRules:
      - {pattern: "deploy-*", action: ASK, runtime: nightly, widestScope: SESSION, approvers: 2}

`runtime` absent: every runtime. `unattended: true` (a pre-approval, U5) only with ALLOW and
a runtime. `widestScope` TURN, SESSION or AGENT (the default). A rule identical to one that
exists is not added twice; a rule for the same pattern (and runtime) with another action or
scope is refused, naming the one that exists: the file never changes a rule silently.
`approvers` 1, 2 or 3 (default 1): how many distinct people, never the request's own
principal, must allow what the rule asks about before the grant is written (P3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import GrantScope, RuleAction
from aimon_admin.approvals.models import APPROVERS_MAX, SkillRule, ToolRule
from aimon_admin.approvals.policy import rule_allows_everything, skill_pattern_problems
from aimon_admin.approvals.tool_rule_grammar import RuleTextError, parse_rule_text
from aimon_admin.core.actors import Actor
from aimon_admin.registry import config as registry_config
from aimon_admin.registry.config import Config, ConfigError, ConfigResult
from aimon_admin.runtimes.models import RUNTIME_NAME_VALIDATOR, AgentRuntime

TOOL_RULE_KEYS = ("action", "approvers", "pattern", "runtime", "unattended")
SKILL_RULE_KEYS = ("action", "approvers", "pattern", "runtime", "widestScope")

RULE_CONFLICT = (
    "a rule for {pattern} ({where}) already exists with {existing}; the file says {given}: change "
    "the file, or delete the rule on the rules page first"
)
NO_RUNTIME = "no runtime is named {name!r}"
ALLOW_EVERYTHING_REFUSED = (
    "an ALLOW for every skill (*) is not loaded from a file: write it on the rules page, where it "
    "is confirmed"
)
PRE_APPROVAL_ONLY_ALLOW = "unattended: true (a pre-approval) needs action: ALLOW"
PRE_APPROVAL_ONLY_RUNTIME = (
    "unattended: true (a pre-approval) needs the runtime whose unattended runs it answers"
)


@dataclass(frozen=True)
class ToolRuleEntry:
    line: int
    where: str  # toolRules[i]
    text: str
    action: RuleAction
    runtime: str | None
    unattended: bool
    approvers: int = 1


@dataclass(frozen=True)
class SkillRuleEntry:
    line: int
    where: str  # skillRules[i]
    pattern: str
    action: RuleAction
    runtime: str | None
    widest_scope: GrantScope
    approvers: int = 1


# --- Reading ------------------------------------------------------------------------------------


def _entries(parser: Any, node: Node, section: str) -> list[tuple[int, str, MappingNode]]:
    if not isinstance(node, SequenceNode):
        parser.error(node, f"{section} must be a list of rules, not {parser.kind_of(node)}")
        return []
    found = []
    for index, item in enumerate(node.value):
        where = f"{section}[{index}]"
        if not isinstance(item, MappingNode):
            parser.error(item, f"{where} must be a mapping (pattern, action, …), not {parser.kind_of(item)}")
            continue
        found.append((index, where, item))
    return found


def _action(parser: Any, node: Node, where: str) -> RuleAction | None:
    if parser.is_text(node) and node.value in RuleAction.values:
        return RuleAction(node.value)
    parser.error(node, f"{where}.action must be {', '.join(RuleAction.values)}, not {parser.shown(node)}")
    return None


def _approvers(parser: Any, node: Node, where: str) -> int | None:
    """P3: how many people must allow, a whole number from 1 to APPROVERS_MAX."""
    value = parser.scalar(node) if isinstance(node, ScalarNode) else None
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= APPROVERS_MAX:
        return value
    parser.error(
        node, f"{where}.approvers must be a whole number from 1 to {APPROVERS_MAX}, not {parser.shown(node)}"
    )
    return None


def _runtime(parser: Any, node: Node, where: str) -> str | None:
    name = parser.text(node, f"{where}.runtime")
    if name is not None and RUNTIME_NAME_VALIDATOR.regex.fullmatch(name) is None:
        parser.error(node, f"{where}.runtime: {NO_RUNTIME.format(name=name)}")
        return None
    return name


def _tool_rules(parser: Any, node: Node) -> list[ToolRuleEntry]:
    """toolRules: [{pattern: "Bash(rm:*)", action: DENY, runtime, unattended}, …]"""
    entries: list[ToolRuleEntry] = []
    first_line: dict[tuple[str | None, str, str, str, bool], int] = {}
    for _index, where, item in _entries(parser, node, "toolRules"):
        before = len(parser.errors)
        given: dict[str, Any] = {}
        seen: set[str] = set()
        for key, _key_node, value in parser.mapping(item, where, TOOL_RULE_KEYS):
            seen.add(key)
            if key == "pattern":
                text = parser.text(value, f"{where}.pattern")
                if text is not None:
                    try:
                        given["parsed"] = parse_rule_text(text)
                        given["text"] = text.strip()
                    except RuleTextError as exc:
                        parser.error(value, f"{where}.pattern: {' '.join(exc.problems)}")
            elif key == "action":
                given["action"] = _action(parser, value, where)
            elif key == "runtime":
                given["runtime"] = _runtime(parser, value, where)
            elif key == "approvers":
                given["approvers"] = _approvers(parser, value, where)
            elif parser.is_bool(value):
                given["unattended"] = parser.scalar(value)
            else:
                parser.error(value, f"{where}.unattended must be true or false, not {parser.kind_of(value)}")
        for required in ("pattern", "action"):
            if required not in seen:
                parser.error(item, f"{where} needs {required}")
        if len(parser.errors) > before:
            continue
        action, runtime, unattended = given["action"], given.get("runtime"), given.get("unattended", False)
        if unattended and action != RuleAction.ALLOW:
            parser.error(item, f"{where}: {PRE_APPROVAL_ONLY_ALLOW}")
            continue
        if unattended and runtime is None:
            parser.error(item, f"{where}: {PRE_APPROVAL_ONLY_RUNTIME}")
            continue
        parsed = given["parsed"]
        key = (runtime, parsed.server, parsed.tool, parsed.pattern, unattended)
        line = parser.line_of(item)
        if key in first_line:
            parser.error(item, f"{where} repeats the rule for {parsed} (first at line {first_line[key]})")
            continue
        first_line[key] = line
        entries.append(
            ToolRuleEntry(line, where, str(parsed), action, runtime, unattended, given.get("approvers", 1))
        )
    return entries


def _skill_rules(parser: Any, node: Node) -> list[SkillRuleEntry]:
    """skillRules: [{pattern: "deploy-*", action: ASK, runtime, widestScope}, …]"""
    entries: list[SkillRuleEntry] = []
    first_line: dict[tuple[str | None, str], int] = {}
    for _index, where, item in _entries(parser, node, "skillRules"):
        before = len(parser.errors)
        given: dict[str, Any] = {}
        seen: set[str] = set()
        for key, _key_node, value in parser.mapping(item, where, SKILL_RULE_KEYS):
            seen.add(key)
            if key == "pattern":
                pattern = parser.text(value, f"{where}.pattern")
                problems = skill_pattern_problems(pattern) if pattern is not None else []
                if problems:
                    parser.error(value, f"{where}.pattern: {' '.join(problems)}")
                elif pattern is not None:
                    given["pattern"] = pattern
            elif key == "action":
                given["action"] = _action(parser, value, where)
            elif key == "runtime":
                given["runtime"] = _runtime(parser, value, where)
            elif key == "approvers":
                given["approvers"] = _approvers(parser, value, where)
            elif parser.is_text(value) and value.value in GrantScope.values:
                given["widest_scope"] = GrantScope(value.value)
            else:
                choices = ", ".join(GrantScope.values)
                parser.error(value, f"{where}.widestScope must be {choices}, not {parser.shown(value)}")
        for required in ("pattern", "action"):
            if required not in seen:
                parser.error(item, f"{where} needs {required}")
        if len(parser.errors) > before:
            continue
        pattern, action, runtime = given["pattern"], given["action"], given.get("runtime")
        if rule_allows_everything(action=action, pattern=pattern):
            parser.error(item, f"{where}: {ALLOW_EVERYTHING_REFUSED}")
            continue
        line = parser.line_of(item)
        if (runtime, pattern) in first_line:
            parser.error(
                item, f"{where} repeats the rule for {pattern} (first at line {first_line[runtime, pattern]})"
            )
            continue
        first_line[runtime, pattern] = line
        entries.append(
            SkillRuleEntry(
                line,
                where,
                pattern,
                action,
                runtime,
                given.get("widest_scope", GrantScope.AGENT),
                given.get("approvers", 1),
            )
        )
    return entries


SECTIONS = {"toolRules": _tool_rules, "skillRules": _skill_rules}


def config_read(path: str | Path) -> Config:
    """Read and check a whole configuration file: servers, tool subjects, tool and skill
    rules. Raises ConfigError listing every problem, each at its FILE:LINE."""
    return registry_config.config_read(path, sections=SECTIONS)


def config_parse(data: bytes | str, *, filename: str) -> Config:
    return registry_config.config_parse(data, filename=filename, sections=SECTIONS)


# --- Applying -------------------------------------------------------------------------------------


def config_apply(
    config: Config, *, actor: Actor, then: Callable[[], dict[str, list[str]]] | None = None
) -> ConfigResult:
    """Apply the whole file in one transaction: the registry's part, then the rules, then
    `then` (a higher app's sections: notifications' webhooks); one CONFIG_LOADED event
    records it all. Any refusal applies nothing."""

    def rules_then() -> dict[str, list[str]]:
        report = _apply_rules(config, actor)
        if then is not None:
            report.update(then())
        return report

    return registry_config.config_apply(config, actor=actor, then=rules_then)


def _runtime_named(config: Config, line: int, where: str, name: str | None) -> AgentRuntime | None:
    if name is None:
        return None
    runtime = AgentRuntime.objects.filter(name=name).first()
    if runtime is None:
        raise ConfigError([f"{config.filename}:{line}: {where}.runtime: {NO_RUNTIME.format(name=name)}"])
    return runtime


def _refused(config: Config, line: int, where: str, exc: ValidationError) -> ConfigError:
    return ConfigError([f"{config.filename}:{line}: {where}: {' '.join(exc.messages)}"])


def _apply_rules(config: Config, actor: Actor) -> dict[str, list[str]]:
    report: dict[str, list[str]] = {}
    if "toolRules" in config.extra:
        created, unchanged = [], []
        for entry in config.extra["toolRules"]:
            (created if _apply_tool_rule(config, entry, actor) else unchanged).append(entry.text)
        report.update(tool_rules_created=created, tool_rules_unchanged=unchanged)
    if "skillRules" in config.extra:
        created, unchanged = [], []
        for entry in config.extra["skillRules"]:
            (created if _apply_skill_rule(config, entry, actor) else unchanged).append(entry.pattern)
        report.update(skill_rules_created=created, skill_rules_unchanged=unchanged)
    return report


def _people(approvers: int) -> str:
    return f", {approvers} people must allow" if approvers > 1 else ""


def _where(runtime: AgentRuntime | None, unattended: bool = False) -> str:
    who = f"runtime {runtime.name}" if runtime else "every runtime"
    return f"{who}, a pre-approval" if unattended else who


def _apply_tool_rule(config: Config, entry: ToolRuleEntry, actor: Actor) -> bool:
    """Writes the rule; False when an identical one exists."""
    runtime = _runtime_named(config, entry.line, entry.where, entry.runtime)
    parsed = parse_rule_text(entry.text)
    existing = ToolRule.objects.filter(
        runtime=runtime,
        server=parsed.server,
        tool=parsed.tool,
        pattern=parsed.pattern,
        unattended=entry.unattended,
    ).first()
    if existing is not None:
        if (existing.action, existing.approvers) == (entry.action, entry.approvers):
            return False
        message = RULE_CONFLICT.format(
            pattern=entry.text,
            where=_where(runtime, entry.unattended),
            existing=f"{existing.action}{_people(existing.approvers)}",
            given=f"{entry.action}{_people(entry.approvers)}",
        )
        raise ConfigError([f"{config.filename}:{entry.line}: {entry.where}: {message}"])
    try:
        rules.tool_rule_create(
            text=entry.text,
            action=entry.action,
            runtime=runtime,
            unattended=entry.unattended,
            approvers=entry.approvers,
            actor=actor,
        )
    except ValidationError as exc:
        raise _refused(config, entry.line, entry.where, exc) from exc
    return True


def _apply_skill_rule(config: Config, entry: SkillRuleEntry, actor: Actor) -> bool:
    """Writes the rule; False when an identical one exists."""
    runtime = _runtime_named(config, entry.line, entry.where, entry.runtime)
    existing = SkillRule.objects.filter(runtime=runtime, pattern=entry.pattern).first()
    if existing is not None:
        if (existing.action, existing.widest_scope, existing.approvers) == (
            entry.action,
            entry.widest_scope,
            entry.approvers,
        ):
            return False
        message = RULE_CONFLICT.format(
            pattern=entry.pattern,
            where=_where(runtime),
            existing=f"{existing.action}, widest answer {existing.widest_scope}{_people(existing.approvers)}",
            given=f"{entry.action}, widest answer {entry.widest_scope}{_people(entry.approvers)}",
        )
        raise ConfigError([f"{config.filename}:{entry.line}: {entry.where}: {message}"])
    try:
        rules.rule_create(
            pattern=entry.pattern,
            action=entry.action,
            runtime=runtime,
            widest_scope=entry.widest_scope,
            approvers=entry.approvers,
            actor=actor,
        )
    except ValidationError as exc:
        raise _refused(config, entry.line, entry.where, exc) from exc
    return True
