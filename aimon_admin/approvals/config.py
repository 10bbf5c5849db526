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
from functools import partial
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db.models import TextChoices
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from aimon_admin.approvals import rules
from aimon_admin.approvals.choices import GrantScope, RuleAction
from aimon_admin.approvals.models import APPROVERS_MAX, SkillRule, ToolRule
from aimon_admin.approvals.policy import rule_allows_everything, skill_pattern_problems
from aimon_admin.approvals.tool_rule_grammar import RuleText, RuleTextError, parse_rule_text
from aimon_admin.core.actors import Actor
from aimon_admin.registry import config as registry_config
from aimon_admin.registry.config import Config, ConfigError, ConfigResult
from aimon_admin.runtimes.models import RUNTIME_NAME_VALIDATOR, AgentRuntime

TOOL_RULE_KEYS = ("action", "approvers", "pattern", "runtime", "unattended")
SKILL_RULE_KEYS = ("action", "approvers", "pattern", "runtime", "widestScope")
Reader = Callable[[Any, Node, str], Any]  # (parser, value, where): the value, or None once refused

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
class RuleEntry:
    """A rule as read from its section; each kind's subclass says what it does on the
    path both kinds share."""

    line: int
    where: str  # toolRules[i], skillRules[i]
    text: str  # what it matches: a tool rule's text, a skill rule's pattern
    action: RuleAction
    runtime: str | None
    approvers: int


@dataclass(frozen=True)
class ToolRuleEntry(RuleEntry):
    unattended: bool = False

    section: ClassVar[str] = "toolRules"
    keys: ClassVar[tuple[str, ...]] = TOOL_RULE_KEYS
    reported: ClassVar[str] = "tool_rules"  # tool_rules_created, tool_rules_unchanged

    @staticmethod
    def read_pattern(parser: Any, node: Node, where: str) -> RuleText | None:
        text = parser.text(node, f"{where}.pattern")
        if text is None:
            return None
        try:
            return parse_rule_text(text)
        except RuleTextError as exc:
            parser.error(node, f"{where}.pattern: {' '.join(exc.problems)}")
            return None

    @classmethod
    def made(cls, parser: Any, item: MappingNode, where: str, given: dict[str, Any]) -> ToolRuleEntry | None:
        action, runtime, unattended = given["action"], given.get("runtime"), given.get("unattended", False)
        if unattended and action != RuleAction.ALLOW:
            parser.error(item, f"{where}: {PRE_APPROVAL_ONLY_ALLOW}")
            return None
        if unattended and runtime is None:
            parser.error(item, f"{where}: {PRE_APPROVAL_ONLY_RUNTIME}")
            return None
        text, approvers = str(given["pattern"]), given.get("approvers", 1)
        return cls(parser.line_of(item), where, text, action, runtime, approvers, unattended)

    def existing(self, runtime: AgentRuntime | None) -> ToolRule | None:
        """The stored rule for what this one matches, where it holds, if any."""
        parsed = parse_rule_text(self.text)
        return ToolRule.objects.filter(
            runtime=runtime,
            server=parsed.server,
            tool=parsed.tool,
            pattern=parsed.pattern,
            unattended=self.unattended,
        ).first()

    @staticmethod
    def answer(rule: ToolRule | ToolRuleEntry) -> str:
        """What a rule answers, as a conflict names it: two rules that answer alike are one."""
        return f"{rule.action}{_people(rule.approvers)}"

    def create(self, runtime: AgentRuntime | None, actor: Actor) -> None:
        rules.tool_rule_create(
            text=self.text,
            action=self.action,
            runtime=runtime,
            unattended=self.unattended,
            approvers=self.approvers,
            actor=actor,
        )


@dataclass(frozen=True)
class SkillRuleEntry(RuleEntry):
    widest_scope: GrantScope = GrantScope.AGENT

    section: ClassVar[str] = "skillRules"
    keys: ClassVar[tuple[str, ...]] = SKILL_RULE_KEYS
    reported: ClassVar[str] = "skill_rules"
    unattended: ClassVar[bool] = False  # only a tool rule is a pre-approval (U5)

    @staticmethod
    def read_pattern(parser: Any, node: Node, where: str) -> str | None:
        pattern = parser.text(node, f"{where}.pattern")
        problems = skill_pattern_problems(pattern) if pattern is not None else []
        if problems:
            parser.error(node, f"{where}.pattern: {' '.join(problems)}")
            return None
        return pattern

    @classmethod
    def made(cls, parser: Any, item: MappingNode, where: str, given: dict[str, Any]) -> SkillRuleEntry | None:
        pattern, action, runtime = given["pattern"], given["action"], given.get("runtime")
        if rule_allows_everything(action=action, pattern=pattern):
            parser.error(item, f"{where}: {ALLOW_EVERYTHING_REFUSED}")
            return None
        scope, approvers = given.get("widestScope", GrantScope.AGENT), given.get("approvers", 1)
        return cls(parser.line_of(item), where, pattern, action, runtime, approvers, scope)

    def existing(self, runtime: AgentRuntime | None) -> SkillRule | None:
        return SkillRule.objects.filter(runtime=runtime, pattern=self.text).first()

    @staticmethod
    def answer(rule: SkillRule | SkillRuleEntry) -> str:
        return f"{rule.action}, widest answer {rule.widest_scope}{_people(rule.approvers)}"

    def create(self, runtime: AgentRuntime | None, actor: Actor) -> None:
        rules.rule_create(
            pattern=self.text,
            action=self.action,
            runtime=runtime,
            widest_scope=self.widest_scope,
            approvers=self.approvers,
            actor=actor,
        )


# --- Reading ------------------------------------------------------------------------------------


def _choice(choices: type[TextChoices], key: str) -> Reader:
    def read(parser: Any, node: Node, where: str) -> Any:
        if parser.is_text(node) and node.value in choices.values:
            return choices(node.value)
        parser.error(node, f"{where}.{key} must be {', '.join(choices.values)}, not {parser.shown(node)}")
        return None

    return read


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


def _unattended(parser: Any, node: Node, where: str) -> bool | None:  # toolRules only
    if parser.is_bool(node):
        return parser.scalar(node)
    parser.error(node, f"{where}.unattended must be true or false, not {parser.kind_of(node)}")
    return None


# How each key but the pattern (read by its kind's grammar) is read: its value, or None once
# what is wrong with it is reported.
READERS: dict[str, Reader] = {
    "action": _choice(RuleAction, "action"),
    "approvers": _approvers,
    "runtime": _runtime,
    "unattended": _unattended,
    "widestScope": _choice(GrantScope, "widestScope"),  # skillRules only
}


def _rules(parser: Any, node: Node, *, kind: type[ToolRuleEntry | SkillRuleEntry]) -> list[Any]:
    """One rule section of either kind (see the format above): each rule's keys read, its
    pattern by the kind's grammar, then made an entry by the kind, which refuses what it
    must; a rule that repeats another of the section (same runtime, same match) is refused."""
    if not isinstance(node, SequenceNode):
        parser.error(node, f"{kind.section} must be a list of rules, not {parser.kind_of(node)}")
        return []
    entries = []
    first_line: dict[tuple[Any, ...], int] = {}
    for index, item in enumerate(node.value):
        where = f"{kind.section}[{index}]"
        if not isinstance(item, MappingNode):
            parser.error(item, f"{where} must be a mapping (pattern, action, …), not {parser.kind_of(item)}")
            continue
        before = len(parser.errors)
        given = {
            key: (kind.read_pattern if key == "pattern" else READERS[key])(parser, value, where)
            for key, _key_node, value in parser.mapping(item, where, kind.keys)
        }
        for required in ("pattern", "action"):
            if required not in given:
                parser.error(item, f"{where} needs {required}")
        entry = kind.made(parser, item, where, given) if len(parser.errors) == before else None
        if entry is None:
            continue
        same = (entry.runtime, entry.text, entry.unattended)
        if same in first_line:
            parser.error(
                item, f"{where} repeats the rule for {entry.text} (first at line {first_line[same]})"
            )
            continue
        first_line[same] = entry.line
        entries.append(entry)
    return entries


KINDS = (ToolRuleEntry, SkillRuleEntry)
SECTIONS = {kind.section: partial(_rules, kind=kind) for kind in KINDS}


# --- Applying -------------------------------------------------------------------------------------


def config_apply(
    config: Config, *, actor: Actor, then: Callable[[], dict[str, list[str]]] | None = None
) -> ConfigResult:
    """Apply the whole file in one transaction: the registry's part, then the rules, then
    `then` (a higher app's sections: notifications' webhooks); one CONFIG_LOADED event
    records it all. Any refusal applies nothing."""

    def rules_then() -> dict[str, list[str]]:
        report: dict[str, list[str]] = {}
        for kind in KINDS:
            if kind.section in config.extra:
                created, unchanged = [], []
                for entry in config.extra[kind.section]:
                    (created if _apply_rule(config, entry, actor) else unchanged).append(entry.text)
                report.update({f"{kind.reported}_created": created, f"{kind.reported}_unchanged": unchanged})
        if then is not None:
            report.update(then())
        return report

    return registry_config.config_apply(config, actor=actor, then=rules_then)


def _people(approvers: int) -> str:
    return f", {approvers} people must allow" if approvers > 1 else ""


def _apply_rule(config: Config, entry: ToolRuleEntry | SkillRuleEntry, actor: Actor) -> bool:
    """Writes the rule; False when an identical one exists: one that answers as the file's
    would (the same action, widest answer and people)."""

    def refused(message: str, where: str = entry.where) -> ConfigError:
        return ConfigError([f"{config.filename}:{entry.line}: {where}: {message}"])

    runtime = None
    if entry.runtime is not None:
        runtime = AgentRuntime.objects.filter(name=entry.runtime).first()
        if runtime is None:
            raise refused(NO_RUNTIME.format(name=entry.runtime), f"{entry.where}.runtime")
    existing = entry.existing(runtime)
    if existing is not None:
        answer, given = entry.answer(existing), entry.answer(entry)
        if answer == given:
            return False
        who = f"runtime {runtime.name}" if runtime else "every runtime"
        where = f"{who}, a pre-approval" if entry.unattended else who
        raise refused(RULE_CONFLICT.format(pattern=entry.text, where=where, existing=answer, given=given))
    try:
        entry.create(runtime, actor)
    except ValidationError as exc:
        raise refused(" ".join(exc.messages)) from exc
    return True
