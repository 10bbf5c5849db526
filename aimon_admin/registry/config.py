"""Operator configuration from a YAML file (`manage.py load_config`).

The file is read with PyYAML's compose API, so every value keeps the line it came from
and every error names `FILE:LINE`. The whole file is checked before anything is written;
then it is applied in one transaction, so a file with any error changes nothing (T13).

Format::

    mcpServers:
      git:                      # the server's name
        command: uvx            # command -> STDIO; url -> STREAMABLE_HTTP; never both
        args: [mcp-server-git]
        env: {GIT_DIR: /srv/repo}           # secret: never sent to runtimes
        timeoutSeconds: 30                  # 1-600, default 30
        annotationTrust: IGNORE             # IGNORE (default) or TRUST, nothing else
      search:
        url: https://search.example/mcp
        headers: {Authorization: Bearer x}  # secret: never sent to runtimes
        transport: STREAMABLE_HTTP          # optional; must agree with command/url
        enabled: true                       # default true
    toolSubjects:               # U1: each tool's subject argument
      Bash: command             # a runtime's own tool, by name
      git/git_push: remote      # an MCP server's tool, as server/tool

A server named in the file is set to exactly what the file says: a setting left out takes
its default (no args, no env, no headers, 30 seconds, IGNORE, enabled). Servers the file
does not name are left as they are. A file naming a retired server is refused whole: a
retired server is never revived, and its name is never given to another. The subjects of
tools the file does not name are left as they are.

Other apps add sections of their own (`sections`: approvals adds toolRules and skillRules,
aimon_admin/approvals/config.py), read by the same parser with the same FILE:LINE errors
and applied in the same transaction (`then`).

Over 500 lines on purpose: the parser and the applier of one file format, side by side, so
that every spec the checking accepts is one the applying writes, and one reading shows both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.services import audit_record
from aimon_admin.core.actors import Actor
from aimon_admin.registry import selectors, services
from aimon_admin.registry.choices import AnnotationTrust, McpTransport
from aimon_admin.registry.models import SERVER_NAME_VALIDATOR, McpServer
from aimon_admin.registry.services.subjects import _subject_problems

TOP_LEVEL_KEYS = ("mcpServers", "toolSubjects")
SERVER_KEYS = (
    "annotationTrust",
    "args",
    "command",
    "enabled",
    "env",
    "headers",
    "timeoutSeconds",
    "transport",
    "url",
)
MAX_TEXT = 500
NESTED_TOO_DEEP = "collections are nested too deeply"
TIMEOUT_RANGE = (1, 600)
DEFAULT_TIMEOUT = 30

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_FLOAT = "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"
_KINDS = {_STR: "a string", _INT: "a number", _FLOAT: "a number", _BOOL: "true/false", _NULL: "empty"}
_URL = URLValidator(schemes=["http", "https"])


class ConfigError(Exception):
    """A configuration file that cannot be applied; each error starts with FILE:LINE."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class ServerSpec:
    name: str
    line: int
    settings: dict[str, Any]  # McpServer fields, annotation_trust excepted
    annotation_trust: AnnotationTrust


@dataclass(frozen=True)
class SubjectSpec:
    server: str
    tool: str
    argument: str
    line: int

    @property
    def label(self) -> str:
        return f"{self.server}/{self.tool}" if self.server else self.tool


@dataclass(frozen=True)
class Config:
    filename: str
    sha256: str
    servers: list[ServerSpec]
    subjects: list[SubjectSpec] = field(default_factory=list)
    # What each extra section (`sections`) read, by its key; absent when the file has none.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ConfigResult:
    created: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    subjects_set: list[str] = field(default_factory=list)
    subjects_unchanged: list[str] = field(default_factory=list)
    # What the extra sections' `then` reported, by key (each a list of names).
    extra: dict[str, list[str]] = field(default_factory=dict)


# An extra top-level section: read with the parser's helpers (errors at their lines).
Section = Callable[["_Parser", Node], Any]


# --- Reading ------------------------------------------------------------------------------------


def config_read(path: str | Path, *, sections: Mapping[str, Section] | None = None) -> Config:
    """Read and check a configuration file; raises ConfigError listing every problem."""
    filename = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError([f"{filename}: cannot read the file: {exc.strerror or exc}"]) from exc
    return config_parse(data, filename=filename, sections=sections)


def config_parse(
    data: bytes | str, *, filename: str, sections: Mapping[str, Section] | None = None
) -> Config:
    """Check a configuration file's text: its servers, its tool subjects and, with
    `sections`, the other top-level keys those read. Every problem is raised at once."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        root = yaml.compose(raw, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        raise ConfigError([f"{filename}:{line}: invalid YAML: {problem}"]) from exc
    except yaml.reader.ReaderError as exc:
        line = raw[: max(exc.position, 0)].count(b"\n") + 1
        raise ConfigError([f"{filename}:{line}: invalid YAML: {exc.reason}"]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([f"{filename}:1: invalid YAML: {exc}"]) from exc
    except RecursionError as exc:
        # PyYAML composes nested collections recursively: "[[[[…" a few thousand deep
        # would otherwise escape as a RecursionError instead of an error naming the file.
        raise ConfigError([f"{filename}:1: invalid YAML: {NESTED_TOO_DEEP}"]) from exc
    parser = _Parser(filename, sections or {})
    parser.document(root)
    if parser.errors:
        raise ConfigError(parser.errors)
    return Config(
        filename=filename,
        sha256=hashlib.sha256(raw).hexdigest(),
        servers=parser.found_servers,
        subjects=parser.found_subjects,
        extra=parser.found_extra,
    )


def _line(node: Node) -> int:
    return node.start_mark.line + 1


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return _KINDS.get(node.tag, f"a value tagged {node.tag}")


def _shown(node: Node) -> str:
    """A wrong value as the error shows it: a string quoted, a number or flag as written."""
    if isinstance(node, ScalarNode) and node.tag == _STR:
        return repr(node.value)
    if isinstance(node, ScalarNode) and node.tag in (_INT, _FLOAT, _BOOL):
        return node.value
    return _kind(node)


class _Parser:
    def __init__(self, filename: str, sections: Mapping[str, Section] | None = None) -> None:
        self.filename = filename
        self._errors: list[tuple[int, str]] = []
        self._constructor = yaml.constructor.SafeConstructor()
        self.sections = dict(sections or {})
        self.found_servers: list[ServerSpec] = []
        self.found_subjects: list[SubjectSpec] = []
        self.found_extra: dict[str, Any] = {}

    @property
    def errors(self) -> list[str]:
        """Every problem found, in the order of the file."""
        return [f"{self.filename}:{line}: {message}" for line, message in sorted(self._errors)]

    def error(self, node: Node, message: str) -> None:
        self._errors.append((_line(node), message))

    def mapping(
        self, node: Node, where: str, allowed: tuple[str, ...] | None = None
    ) -> list[tuple[str, Node, Node]]:
        """The (key, key node, value node) pairs of a mapping with string keys, each once.

        Reports a node that is not a mapping, a non-string key, a repeated key and (when
        `allowed` is given) a key not in `allowed`; such pairs are left out.
        """
        if not isinstance(node, MappingNode):
            self.error(node, f"{where} must be a mapping, not {_kind(node)}")
            return []
        pairs: list[tuple[str, Node, Node]] = []
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                self.error(key_node, f"merge keys (<<) are not supported in {where}: write each setting out")
                continue
            if not (isinstance(key_node, ScalarNode) and key_node.tag == _STR):
                self.error(key_node, f"keys in {where} must be strings, not {_kind(key_node)}")
                continue
            key = key_node.value
            if key in first_line:
                self.error(key_node, f"duplicate key {key!r} in {where} (first at line {first_line[key]})")
                continue
            first_line[key] = _line(key_node)
            if allowed is not None and key not in allowed:
                self.error(key_node, f"unknown key {key!r} in {where} (allowed: {', '.join(allowed)})")
                continue
            pairs.append((key, key_node, value_node))
        return pairs

    def scalar(self, node: Node) -> Any:
        if node.tag == _STR:
            return node.value
        if node.tag == _INT:
            return self._constructor.construct_yaml_int(node)
        if node.tag == _BOOL:
            return self._constructor.construct_yaml_bool(node)
        return None

    def text(self, node: Node, name: str, *, secret: bool = False) -> str | None:
        if not (isinstance(node, ScalarNode) and node.tag == _STR):
            self.error(node, f"{name} must be a string, not {_kind(node)}")
            return None
        value: str = node.value
        if "\x00" in value:
            self.error(node, f"{name} must not contain NUL characters")
            return None
        if len(value) > MAX_TEXT and not secret:
            self.error(node, f"{name} must be at most {MAX_TEXT} characters, not {len(value)}")
            return None
        return value

    # --- the document ---

    # What another app's section reads with (approvals/config.py).

    def line_of(self, node: Node) -> int:
        return _line(node)

    def kind_of(self, node: Node) -> str:
        return _kind(node)

    def shown(self, node: Node) -> str:
        return _shown(node)

    def is_text(self, node: Node) -> bool:
        return isinstance(node, ScalarNode) and node.tag == _STR

    def is_bool(self, node: Node) -> bool:
        return isinstance(node, ScalarNode) and node.tag == _BOOL

    # --- the document ---

    def document(self, root: Node | None) -> None:
        if root is None:
            self._errors.append((1, "the file is empty (expected a mapping with mcpServers)"))
            return
        for key, _key_node, value in self.mapping(root, "the file", (*TOP_LEVEL_KEYS, *self.sections)):
            if key == "mcpServers":
                self.found_servers = self.servers(value)
            elif key == "toolSubjects":
                self.found_subjects = self.subjects(value)
            else:
                self.found_extra[key] = self.sections[key](self, value)

    def subjects(self, node: Node) -> list[SubjectSpec]:
        """toolSubjects: {Bash: command, git/git_push: remote} (U1)."""
        specs = []
        for name, key_node, value in self.mapping(node, "toolSubjects"):
            server, tool = name.split("/", 1) if "/" in name else ("", name)
            argument = self.text(value, f"toolSubjects.{name}")
            if argument is None:
                continue
            if not argument:
                self.error(value, f"toolSubjects.{name} must name an argument (e.g. command), not ''")
                continue
            problems = _subject_problems(server=server, tool=tool, argument=argument)
            for field_name, messages in problems.items():
                for message in messages:
                    self.error(
                        value if field_name == "argument" else key_node, f"toolSubjects.{name}: {message}"
                    )
            if not problems:
                specs.append(SubjectSpec(server=server, tool=tool, argument=argument, line=_line(key_node)))
        return specs

    def servers(self, node: Node) -> list[ServerSpec]:
        specs = []
        for name, key_node, value in self.mapping(node, "mcpServers"):
            try:
                SERVER_NAME_VALIDATOR(name)
            except ValidationError as exc:
                self.error(key_node, f"server name {name!r}: {' '.join(exc.messages)}")
                continue
            spec = self.server(name, key_node, value)
            if spec is not None:
                specs.append(spec)
        return specs

    def server(self, name: str, key_node: Node, node: Node) -> ServerSpec | None:
        where = f"mcpServers.{name}"
        errors_before = len(self._errors)
        readers: dict[str, Callable[[Node], Any]] = {
            "command": lambda n: self.text(n, "command"),
            "args": self.args,
            "env": lambda n: self.secrets(n, "env"),
            "url": self.url,
            "headers": lambda n: self.secrets(n, "headers"),
            "timeoutSeconds": self.timeout,
            "annotationTrust": self.trust,
            "transport": self.transport,
            "enabled": self.enabled,
        }
        given: dict[str, Any] = {}
        for key, _key_node, value in self.mapping(node, where, SERVER_KEYS):
            given[key] = readers[key](value)
        if len(self._errors) > errors_before:
            return None

        command, url = given.get("command") or "", given.get("url") or ""
        if command and url:
            self.error(key_node, f"{where} has both command and url: give command (stdio) or url (HTTP)")
            return None
        if not command and not url:
            self.error(key_node, f"{where} needs command (stdio) or url (HTTP)")
            return None
        inferred = McpTransport.STDIO if command else McpTransport.STREAMABLE_HTTP
        transport = given.get("transport", inferred)
        if transport != inferred:
            needs = "command" if transport == McpTransport.STDIO else "url"
            self.error(key_node, f"{where}: transport {transport} needs {needs}")
            return None
        return ServerSpec(
            name=name,
            line=_line(key_node),
            settings={
                "transport": transport,
                "command": command,
                "args": given.get("args", []),
                "env": given.get("env", {}),
                "url": url,
                "headers": given.get("headers", {}),
                "timeout_seconds": given.get("timeoutSeconds", DEFAULT_TIMEOUT),
                "enabled": given.get("enabled", True),
            },
            annotation_trust=given.get("annotationTrust", AnnotationTrust.IGNORE),
        )

    # --- one setting each ---

    def args(self, node: Node) -> list[str] | None:
        if not isinstance(node, SequenceNode):
            self.error(node, f"args must be a list of strings, not {_kind(node)}")
            return None
        values = [self.text(item, f"args[{index}]") for index, item in enumerate(node.value)]
        return None if any(value is None for value in values) else values  # type: ignore[return-value]

    def secrets(self, node: Node, name: str) -> dict[str, str] | None:
        # Values are secrets: errors name the key and the line, never the value.
        out: dict[str, str] = {}
        for key, _key_node, value in self.mapping(node, name):
            text = self.text(value, f"{name}.{key}", secret=True)
            if text is not None:
                out[key] = text
        return out

    def url(self, node: Node) -> str | None:
        value = self.text(node, "url")
        if value is None:
            return None
        try:
            _URL(value)
        except ValidationError:
            self.error(node, f"url must be an http or https URL, not {value!r}")
            return None
        return value

    def timeout(self, node: Node) -> int | None:
        low, high = TIMEOUT_RANGE
        value = self.scalar(node) if isinstance(node, ScalarNode) and node.tag == _INT else None
        if value is None or not low <= value <= high:
            shown = _shown(node)
            self.error(node, f"timeoutSeconds must be a whole number from {low} to {high}, not {shown}")
            return None
        return value

    def trust(self, node: Node) -> AnnotationTrust | None:
        # T13: an unknown value is an error, never a silent IGNORE.
        if isinstance(node, ScalarNode) and node.tag == _STR and node.value in AnnotationTrust.values:
            return AnnotationTrust(node.value)
        self.error(node, f"annotationTrust must be {' or '.join(AnnotationTrust.values)}, not {_shown(node)}")
        return None

    def transport(self, node: Node) -> McpTransport | None:
        if isinstance(node, ScalarNode) and node.tag == _STR and node.value in McpTransport.values:
            return McpTransport(node.value)
        self.error(node, f"transport must be {' or '.join(McpTransport.values)}, not {_shown(node)}")
        return None

    def enabled(self, node: Node) -> bool | None:
        if isinstance(node, ScalarNode) and node.tag == _BOOL:
            return self.scalar(node)
        self.error(node, f"enabled must be true or false, not {_kind(node)}")
        return None


# --- Applying -------------------------------------------------------------------------------------


@transaction.atomic
def config_apply(
    config: Config, *, actor: Actor, then: Callable[[], dict[str, list[str]]] | None = None
) -> ConfigResult:
    """Create or update every server the file names, set the tool subjects it names, then
    run `then` (another app's sections; what it reports joins the result), and record the
    load: all or nothing."""
    result = ConfigResult()
    for spec in config.servers:
        try:
            _apply_server(spec, actor, result)
        except (ValidationError, services.RegistryError, ValueError) as exc:
            messages = exc.messages if isinstance(exc, ValidationError) else [str(exc)]
            raise ConfigError(
                [f"{config.filename}:{spec.line}: mcpServers.{spec.name}: {' '.join(messages)}"]
            ) from exc
    for subject in config.subjects:
        try:
            _apply_subject(subject, actor, result)
        except ValidationError as exc:
            where = f"{config.filename}:{subject.line}: toolSubjects.{subject.label}"
            raise ConfigError([f"{where}: {' '.join(exc.messages)}"]) from exc
    if then is not None:
        result.extra = then()
    details: dict[str, Any] = {
        "file": config.filename,
        "sha256": config.sha256,
        "servers_created": result.created,
        "servers_changed": result.changed,
        "servers_unchanged": result.unchanged,
    }
    if config.subjects:
        details.update(
            tool_subjects_set=result.subjects_set, tool_subjects_unchanged=result.subjects_unchanged
        )
    details.update(result.extra)
    audit_record(
        action=AuditAction.CONFIG_LOADED,
        actor=actor,
        subject_type="config",
        subject=config.filename,
        details=details,
    )
    return result


def _apply_subject(spec: SubjectSpec, actor: Actor, result: ConfigResult) -> None:
    if selectors.subject_argument_for(spec.server, spec.tool).argument == spec.argument:
        result.subjects_unchanged.append(spec.label)
        return
    services.tool_subject_set(server=spec.server, tool=spec.tool, argument=spec.argument, actor=actor)
    result.subjects_set.append(spec.label)


def _apply_server(spec: ServerSpec, actor: Actor, result: ConfigResult) -> None:
    server = McpServer.objects.filter(name=spec.name).first()
    if server is None:
        services.mcp_server_create(
            name=spec.name, actor=actor, annotation_trust=spec.annotation_trust, **spec.settings
        )
        result.created.append(spec.name)
        return
    changed = services.mcp_server_update(server=server, actor=actor, **spec.settings)
    if server.annotation_trust != spec.annotation_trust:
        services.mcp_server_set_trust(server=server, trust=spec.annotation_trust, actor=actor)
        changed = True
    (result.changed if changed else result.unchanged).append(spec.name)
