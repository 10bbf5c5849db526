"""Browser forms for MCP servers, the tool list's filters, the gate simulator and reviews.

Env and header values of an MCP server are secrets: their inputs never render a value
(not even the one just typed into a form that failed to validate), and errors name the
line, never its text.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from django import forms

from aimon_admin.core.encryption import Unreadable, is_unreadable
from aimon_admin.registry.choices import (
    AnnotationTrust,
    DestructiveBehavior,
    IdempotencyBehavior,
    McpTransport,
    ReviewFinding,
    SideEffectLevel,
    SubjectKind,
    ToolSource,
)
from aimon_admin.registry.models import MCP_URL_VALIDATOR, SERVER_NAME_VALIDATOR, McpServer
from aimon_admin.runtimes.models import AgentRuntime

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

ENV_LINE_ERROR = "Line {line}: expected KEY=VALUE, the key made of letters, digits and underscores."
HEADER_LINE_ERROR = "Line {line}: expected Name: value, with a valid header name."
DUPLICATE_NAME_ERROR = "{name} is given twice."
COMMAND_REQUIRED = "A stdio server needs a command."
URL_REQUIRED = "A streamable HTTP server needs a URL."
NAME_TAKEN = "An MCP server with this name already exists."
NAME_RESERVED = "This name is reserved for the page that adds a server; choose another."
SECRETS_NOT_SHOWN = "Values are never shown again. Lines here add or replace; other stored values are kept."
RUNTIME_REQUIRED = "Choose a runtime: its own tools are part of what the gate sees."

RESERVED_SERVER_NAMES = frozenset({"new"})
# Each transport's own inputs, with their empty values.
STDIO_ONLY: dict[str, Any] = {"command": "", "args": [], "env": {}, "env_remove": []}
HTTP_ONLY: dict[str, Any] = {"url": "", "headers": {}, "headers_remove": []}


class SecretTextarea(forms.Textarea):
    """A textarea that never sends its value back to the browser (nor keeps it for a form
    shown again after an error: core.prg reads `secret`)."""

    secret = True

    def format_value(self, value: Any) -> None:
        return None


def _parse_lines(text: str, separator: str, name_re: re.Pattern[str], error: str) -> dict[str, str]:
    values: dict[str, str] = {}
    errors: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        key, sep, value = raw.partition(separator)
        key = key.strip()
        if not sep or not name_re.match(key):
            errors.append(error.format(line=number))
            continue
        if key in values:
            errors.append(DUPLICATE_NAME_ERROR.format(name=key))
            continue
        values[key] = value.strip() if separator == ":" else value
    if errors:
        raise forms.ValidationError(errors)
    return values


# What an operator may type into the server form's free-text boxes.
SERVER_ARGS_MAX = 5000
SERVER_SECRETS_MAX = 10_000


class McpServerForm(forms.Form):
    """Create or edit an MCP server's connection settings (trust has its own confirmation)."""

    name = forms.CharField(max_length=100, validators=[SERVER_NAME_VALIDATOR])
    transport = forms.ChoiceField(choices=McpTransport.choices, widget=forms.RadioSelect)
    command = forms.CharField(
        max_length=500,
        required=False,
        help_text="stdio: the program to start, e.g. npx or /usr/bin/my-server.",
    )
    args = forms.CharField(
        label="Arguments",
        required=False,
        max_length=SERVER_ARGS_MAX,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text="stdio: one argument per line.",
    )
    env = forms.CharField(
        label="Environment",
        required=False,
        max_length=SERVER_SECRETS_MAX,
        widget=SecretTextarea(attrs={"rows": 3, "spellcheck": "false", "autocomplete": "off"}),
        help_text="stdio: KEY=VALUE, one per line. Values are secrets and are never shown again.",
    )
    env_remove = forms.MultipleChoiceField(
        label="Remove environment variables", required=False, widget=forms.CheckboxSelectMultiple
    )
    url = forms.URLField(
        label="URL",
        max_length=500,
        required=False,
        assume_scheme="https",
        validators=[MCP_URL_VALIDATOR],
        help_text="Streamable HTTP: the endpoint, an http:// or https:// URL, e.g. https://mcp.example.com/mcp.",
    )
    headers = forms.CharField(
        label="Headers",
        required=False,
        max_length=SERVER_SECRETS_MAX,
        widget=SecretTextarea(attrs={"rows": 3, "spellcheck": "false", "autocomplete": "off"}),
        help_text="Streamable HTTP: Name: value, one per line. Values are secrets and are never shown again.",
    )
    headers_remove = forms.MultipleChoiceField(
        label="Remove headers", required=False, widget=forms.CheckboxSelectMultiple
    )
    timeout_seconds = forms.IntegerField(label="Timeout (seconds)", min_value=1, max_value=600, initial=30)
    enabled = forms.BooleanField(
        required=False, initial=True, help_text="A disabled server's tools are offered to no runtime."
    )

    def __init__(self, *args: Any, server: McpServer | None = None, **kwargs: Any) -> None:
        self.server = server
        if server is not None:
            kwargs.setdefault(
                "initial",
                {
                    "transport": server.transport,
                    "command": server.command,
                    "args": "\n".join(server.args or []),
                    "url": "" if is_unreadable(server.url) else server.url,
                    "timeout_seconds": server.timeout_seconds,
                    "enabled": server.enabled,
                },
            )
        super().__init__(*args, **kwargs)
        if server is None:
            del self.fields["env_remove"], self.fields["headers_remove"]
            self.fields["transport"].initial = McpTransport.STDIO
            return
        del self.fields["name"]
        for secret in ("env", "headers"):
            names = sorted((getattr(server, secret) or {}).keys())
            remove = self.fields[f"{secret}_remove"]
            if names:
                remove.choices = [(name, name) for name in names]
                self.fields[secret].help_text += " " + SECRETS_NOT_SHOWN
            else:
                del self.fields[f"{secret}_remove"]

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if name.lower() in RESERVED_SERVER_NAMES:
            raise forms.ValidationError(NAME_RESERVED)
        if McpServer.objects.filter(name=name).exists():
            raise forms.ValidationError(NAME_TAKEN)
        return name

    def clean_args(self) -> list[str]:
        return [line for line in self.cleaned_data["args"].splitlines() if line.strip()]

    def clean_env(self) -> dict[str, str]:
        return _parse_lines(self.cleaned_data["env"], "=", ENV_NAME, ENV_LINE_ERROR)

    def clean_headers(self) -> dict[str, str]:
        return _parse_lines(self.cleaned_data["headers"], ":", HEADER_NAME, HEADER_LINE_ERROR)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        transport = data.get("transport")
        # The other transport's inputs are hidden and cleared on save: their errors would
        # block the form without being seen.
        other = {McpTransport.STDIO: HTTP_ONLY, McpTransport.STREAMABLE_HTTP: STDIO_ONLY}.get(transport, {})
        for name, empty in other.items():
            self.errors.pop(name, None)
            data[name] = copy.copy(empty)
        if transport == McpTransport.STDIO and not data.get("command", "").strip():
            self.add_error("command", COMMAND_REQUIRED)
        if transport == McpTransport.STREAMABLE_HTTP and not data.get("url") and "url" not in self.errors:
            self.add_error("url", URL_REQUIRED)
        return data

    def _secret(self, name: str) -> dict[str, str] | Unreadable:
        """Stored values minus the removed ones, then the lines typed here on top. Stored
        values no key decrypts stay as they are until lines typed here replace them all."""
        stored = getattr(self.server, name) if self.server is not None else {}
        if is_unreadable(stored):
            return self.cleaned_data[name] or stored
        kept = dict(stored or {})
        for removed in self.cleaned_data.get(f"{name}_remove") or []:
            kept.pop(removed, None)
        kept.update(self.cleaned_data[name])
        return kept

    def service_fields(self) -> dict[str, Any]:
        """The settings for mcp_server_create/update; the other transport's settings are cleared."""
        data = self.cleaned_data
        stdio = data["transport"] == McpTransport.STDIO
        return {
            "transport": data["transport"],
            "command": data["command"].strip() if stdio else "",
            "args": data["args"] if stdio else [],
            "env": self._secret("env") if stdio else {},
            "url": "" if stdio else data["url"],
            "headers": {} if stdio else self._secret("headers"),
            "timeout_seconds": data["timeout_seconds"],
            "enabled": data["enabled"],
        }


class TrustForm(forms.Form):
    trust = forms.ChoiceField(choices=AnnotationTrust.choices)
    preview = forms.CharField(required=False, widget=forms.HiddenInput)


def _any(choices: list[tuple[str, str]], label: str = "Any") -> list[tuple[str, str]]:
    return [("", label), *choices]


class ToolFilterForm(forms.Form):
    """The tool list's filters; every one optional, all combined with AND."""

    name = forms.CharField(
        label="Name", required=False, max_length=200, help_text="Any part of the name, in any case."
    )
    source = forms.ChoiceField(choices=_any(ToolSource.choices), required=False)
    server = forms.ModelChoiceField(
        queryset=McpServer.objects.order_by("name"), to_field_name="name", required=False, empty_label="Any"
    )
    runtime = forms.ModelChoiceField(
        label="Runtime (local tools)",
        queryset=AgentRuntime.objects.order_by("name"),
        to_field_name="name",
        required=False,
        empty_label="Any",
    )
    level = forms.ChoiceField(label="Level", choices=_any(SideEffectLevel.choices), required=False)
    destructive = forms.ChoiceField(choices=_any(DestructiveBehavior.choices), required=False)
    idempotency = forms.ChoiceField(choices=_any(IdempotencyBehavior.choices), required=False)
    awaiting = forms.BooleanField(label="Awaiting review", required=False)
    absent = forms.BooleanField(label="Absent (no longer listed)", required=False)
    after_name = forms.CharField(required=False, widget=forms.HiddenInput)
    after_id = forms.IntegerField(required=False, min_value=0, widget=forms.HiddenInput)

    FILTERS = (
        "name",
        "source",
        "server",
        "runtime",
        "level",
        "destructive",
        "idempotency",
        "awaiting",
        "absent",
    )


ATTENDED = "attended"
UNATTENDED = "unattended"

# The simulator's words for the gate's outcomes (T6-T8); views map GateResult onto them.
OUTCOME_HIDDEN = "Hidden and refused"
OUTCOME_NO_QUESTION = "No question"
OUTCOME_ASKS = "Asks"
OUTCOME_DENIED_UNATTENDED = "Denied unattended"
OUTCOMES = (OUTCOME_HIDDEN, OUTCOME_NO_QUESTION, OUTCOME_ASKS, OUTCOME_DENIED_UNATTENDED)


class RuntimeChoiceField(forms.ModelChoiceField):
    """A runtime by name; a disabled one says so (it is never the default)."""

    def label_from_instance(self, obj: AgentRuntime) -> str:
        return obj.name if obj.is_active else f"{obj.name} (disabled)"


class GateSettingsForm(forms.Form):
    """A runtime, and optionally what-if values for its ceiling and gate threshold."""

    runtime = RuntimeChoiceField(
        queryset=AgentRuntime.objects.order_by("name"),
        to_field_name="name",
        empty_label=None,
        error_messages={"required": RUNTIME_REQUIRED},
    )
    ceiling = forms.ChoiceField(
        label="Ceiling",
        choices=_any(SideEffectLevel.choices, "The runtime's own"),
        required=False,
        help_text="What if the ceiling were this?",
    )
    exempt_at_or_below = forms.ChoiceField(
        label="No question at or below",
        choices=_any(SideEffectLevel.choices, "The runtime's own"),
        required=False,
        help_text="What if the gate threshold were this?",
    )

    def settings(self) -> tuple[AgentRuntime, str, str]:
        data = self.cleaned_data
        runtime = data["runtime"]
        return (
            runtime,
            data.get("ceiling") or runtime.ceiling,
            data.get("exempt_at_or_below") or runtime.exempt_at_or_below,
        )


class SimulatorForm(GateSettingsForm):
    mode = forms.ChoiceField(
        label="Execution",
        choices=[
            (ATTENDED, "Attended: someone can be asked"),
            (UNATTENDED, "Unattended: no session to ask"),
        ],
        initial=ATTENDED,
        required=False,
    )
    outcome = forms.ChoiceField(
        label="Show",
        choices=[("", "Every outcome"), *((label, label) for label in OUTCOMES)],
        required=False,
    )


class ReviewForm(forms.Form):
    finding = forms.ChoiceField(choices=[("", "Choose a finding…"), *ReviewFinding.choices])
    note = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "What it writes; where it runs unattended"}),
    )


SUBJECT_ARGUMENT_HELP = (
    "The argument whose text value tool rules and approvals match: command for a shell tool, "
    "path for a file tool. Leave it empty for none: then only rules and approvals for the whole "
    "tool apply."
)


SUBJECT_KIND_HELP = (
    "Its usual kind: a shell command for an argument called command, a file path for one "
    "called path. A shell command is split into words as a shell would: an allow of git push:* covers "
    "git push with any arguments after it, and never a command that runs anything else "
    "(; && | $(…), git -c, --upload-pack …), which asks. A file path is normalised "
    "(.. and // resolved) before any rule matches it. Text is matched as written."
)


class ToolSubjectForm(forms.Form):
    """U1: name (or clear) a tool's subject argument. `choices` (the input schema's properties)
    are offered as suggestions; any argument name may be typed."""

    argument = forms.CharField(
        label="Subject argument", required=False, max_length=200, help_text=SUBJECT_ARGUMENT_HELP
    )
    kind = forms.ChoiceField(
        label="Read it as",
        required=False,
        choices=[("", "Its usual kind"), *SubjectKind.choices],
        help_text=SUBJECT_KIND_HELP,
    )

    def __init__(self, *args: Any, choices: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.choices = choices or []
        attrs = self.fields["argument"].widget.attrs
        attrs["autocomplete"] = "off"
        if self.choices:
            attrs["list"] = "subject-argument-choices"
