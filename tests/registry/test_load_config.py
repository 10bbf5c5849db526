"""`manage.py load_config FILE.yaml` (operator set-up, README.md): MCP servers from YAML,
every error naming FILE:LINE, and nothing of a bad file applied (T13)."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from aimon_admin.audit.choices import AuditAction, AuditLevel
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.context import Channel
from aimon_admin.registry import services
from aimon_admin.registry.choices import AnnotationTrust, McpTransport
from aimon_admin.registry.models import McpServer, Tool
from tests.conftest import TEST_ACTOR

# The file's top-level keys: the registry's, the rules' (approvals/config.py), then the
# webhooks' (notifications/config.py).
TOP_KEYS = "mcpServers, toolSubjects, toolRules, skillRules, webhooks"

pytestmark = pytest.mark.django_db

SERVER_KEYS = "annotationTrust, args, command, enabled, env, headers, timeoutSeconds, transport, url"

GOOD = """\
mcpServers:
  git:
    command: uvx
    args: [mcp-server-git, --repository, /srv/repo]
    env:
      GIT_TOKEN: "s3cret"
    timeoutSeconds: 20
    annotationTrust: TRUST
  search:
    url: https://search.example/mcp
    headers: {Authorization: Bearer abc}
    enabled: false
"""


def write(tmp_path: Path, text: str, name: str = "aimon.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(path: Path) -> str:
    out = io.StringIO()
    call_command("load_config", str(path), stdout=out)
    return out.getvalue()


def servers() -> list[dict[str, Any]]:
    return list(McpServer.objects.order_by("name").values())


def state() -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    return servers(), list(Tool.objects.order_by("pk").values()), AuditEvent.objects.count()


def test_a_good_file_creates_its_servers(tmp_path: Path) -> None:
    out = load(write(tmp_path, GOOD))

    assert out == f"created: git, search\nloaded {tmp_path / 'aimon.yaml'}: 2 MCP servers\n"
    git, search = McpServer.objects.order_by("name")
    assert (git.transport, git.command, git.args, git.env, git.url, git.headers) == (
        McpTransport.STDIO,
        "uvx",
        ["mcp-server-git", "--repository", "/srv/repo"],
        {"GIT_TOKEN": "s3cret"},
        "",
        {},
    )
    assert (git.timeout_seconds, git.annotation_trust, git.enabled) == (20, AnnotationTrust.TRUST, True)
    assert (search.transport, search.command, search.url, search.headers) == (
        McpTransport.STREAMABLE_HTTP,
        "",
        "https://search.example/mcp",
        {"Authorization": "Bearer abc"},
    )
    # Left out: the defaults (T13: IGNORE unless the file says TRUST).
    assert (search.timeout_seconds, search.annotation_trust, search.enabled, search.args) == (
        30,
        AnnotationTrust.IGNORE,
        False,
        [],
    )


def test_a_load_is_one_config_loaded_event_on_the_command_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)

    load(path)

    loaded = AuditEvent.objects.get(action=AuditAction.CONFIG_LOADED)
    assert (loaded.channel, loaded.level, loaded.subject_type, loaded.subject) == (
        Channel.CLI,
        AuditLevel.INFO,
        "config",
        str(path),
    )
    assert loaded.actor_label.startswith("cli:")
    assert loaded.details["file"] == str(path)
    assert len(loaded.details["sha256"]) == 64
    assert (
        loaded.details["servers_created"],
        loaded.details["servers_changed"],
        loaded.details["servers_unchanged"],
    ) == (["git", "search"], [], [])
    # Each server's own creation is recorded too, with secrets named, never shown.
    created = AuditEvent.objects.filter(action=AuditAction.MCP_SERVER_CREATED).order_by("seq")
    assert [event.subject for event in created] == ["git", "search"]
    assert created[0].details["env_names"] == ["GIT_TOKEN"]
    assert "s3cret" not in str([event.details for event in AuditEvent.objects.all()])


def test_loading_again_updates_servers_and_re_resolves_on_a_trust_change(tmp_path: Path) -> None:  # T13
    load(write(tmp_path, GOOD))
    git = McpServer.objects.get(name="git")
    services.mcp_tools_record(
        server=git,
        listing=[{"name": "git_status", "annotations": {"readOnlyHint": True}}],
        actor=TEST_ACTOR,
        complete=True,
    )
    assert Tool.objects.get(name="git_status").side_effect_level == "READ_ONLY"
    services.mcp_server_create(name="other", actor=TEST_ACTOR, transport="STDIO", command="other-mcp")

    changed = """\
    mcpServers:
      git:
        command: uvx
        args: [mcp-server-git]
        annotationTrust: IGNORE
      search:
        url: https://search.example/mcp
        headers: {Authorization: Bearer abc}
        enabled: false
    """
    out = load(write(tmp_path, changed, "second.yaml"))

    assert out.splitlines()[:2] == ["changed: git", "unchanged: search"]
    git.refresh_from_db()
    # Declarative: what the file leaves out takes its default.
    assert (git.args, git.env, git.timeout_seconds, git.annotation_trust) == (
        ["mcp-server-git"],
        {},
        30,
        AnnotationTrust.IGNORE,
    )
    assert Tool.objects.get(name="git_status").side_effect_level == "MUTATING"
    assert McpServer.objects.filter(name="other").exists()  # servers not in the file: untouched
    loaded = AuditEvent.objects.filter(action=AuditAction.CONFIG_LOADED).order_by("-seq").first()
    assert loaded.details["servers_changed"] == ["git"]
    assert loaded.details["servers_unchanged"] == ["search"]
    trust = AuditEvent.objects.get(action=AuditAction.MCP_TRUST_CHANGED)
    assert (trust.details["before"], trust.details["after"], trust.channel) == (
        "TRUST",
        "IGNORE",
        Channel.CLI,
    )
    change = AuditEvent.objects.get(action=AuditAction.MCP_SERVER_CHANGED)
    assert change.details["changed"] == ["args", "env", "env_names", "timeout_seconds"]


def test_a_file_with_only_unchanged_servers_still_records_the_load(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    load(path)
    events = AuditEvent.objects.count()

    assert load(path).startswith("unchanged: git, search\n")
    assert AuditEvent.objects.count() == events + 1


def test_a_transport_given_must_agree(tmp_path: Path) -> None:
    load(
        write(
            tmp_path,
            """\
            mcpServers:
              a: {command: run-a, transport: STDIO}
              b: {url: "http://127.0.0.1:9000/mcp", transport: STREAMABLE_HTTP}
            """,
        )
    )
    assert [(s["name"], s["transport"]) for s in servers()] == [("a", "STDIO"), ("b", "STREAMABLE_HTTP")]


# --- Errors: each names the file and the line, and applies nothing --------------------------------

ERRORS = [
    (
        "mcpServers:\n  git:\n    command: uvx\n    annotationTrus: TRUST\n",
        f"4: unknown key 'annotationTrus' in mcpServers.git (allowed: {SERVER_KEYS})",
    ),
    (
        "mcpServers:\n  git:\n    command: uvx\n    annotationTrust: trust\n",
        "4: annotationTrust must be IGNORE or TRUST, not 'trust'",
    ),
    (
        "mcpServers:\n  git:\n    command: uvx\n    annotationTrust:\n",
        "4: annotationTrust must be IGNORE or TRUST, not empty",
    ),
    (
        "mcpServers:\n  git:\n    command: uvx\n    annotationTrust: true\n",
        "4: annotationTrust must be IGNORE or TRUST, not true",
    ),
    ("mcpServers: {}\nrules: []\n", f"2: unknown key 'rules' in the file (allowed: {TOP_KEYS})"),
    (
        "mcpServers:\n  git: {command: a}\n  git: {command: b}\n",
        "3: duplicate key 'git' in mcpServers (first at line 2)",
    ),
    (
        "mcpServers:\n  git:\n    command: a\n    command: b\n",
        "4: duplicate key 'command' in mcpServers.git (first at line 3)",
    ),
    ("mcpServers:\n  git: uvx mcp-server-git\n", "2: mcpServers.git must be a mapping, not a string"),
    ("mcpServers:\n  git:\n", "2: mcpServers.git must be a mapping, not empty"),
    ("mcpServers:\n  - git\n", "2: mcpServers must be a mapping, not a list"),
    ("- mcpServers\n", "1: the file must be a mapping, not a list"),
    ("", "1: the file is empty (expected a mapping with mcpServers)"),
    (
        "mcpServers:\n  git:\n    command: uvx\n    args: mcp-server-git\n",
        "4: args must be a list of strings, not a string",
    ),
    (
        "mcpServers:\n  git:\n    command: uvx\n    args:\n      - a\n      - 3\n",
        "6: args[1] must be a string, not a number",
    ),
    ("mcpServers:\n  git:\n    command: 12\n", "3: command must be a string, not a number"),
    ("mcpServers:\n  git:\n    command: uvx\n    env: [A]\n", "4: env must be a mapping, not a list"),
    (
        "mcpServers:\n  git:\n    command: uvx\n    env:\n      PORT: 8080\n",
        "5: env.PORT must be a string, not a number",
    ),
    (
        "mcpServers:\n  git:\n    command: uvx\n    timeoutSeconds: 0\n",
        "4: timeoutSeconds must be a whole number from 1 to 600, not 0",
    ),
    (
        "mcpServers:\n  git:\n    command: uvx\n    timeoutSeconds: 601\n",
        "4: timeoutSeconds must be a whole number from 1 to 600, not 601",
    ),
    (
        "mcpServers:\n  git:\n    command: uvx\n    timeoutSeconds: '30'\n",
        "4: timeoutSeconds must be a whole number from 1 to 600, not '30'",
    ),
    (
        "mcpServers:\n  git:\n    command: uvx\n    timeoutSeconds: 2.5\n",
        "4: timeoutSeconds must be a whole number from 1 to 600, not 2.5",
    ),
    (
        "mcpServers:\n  git:\n    command: uvx\n    enabled: 'no'\n",
        "4: enabled must be true or false, not a string",
    ),
    (
        "mcpServers:\n  git:\n    command: uvx\n    url: https://x.example\n",
        "2: mcpServers.git has both command and url: give command (stdio) or url (HTTP)",
    ),
    ("mcpServers:\n  git:\n    args: [a]\n", "2: mcpServers.git needs command (stdio) or url (HTTP)"),
    (
        "mcpServers:\n  git:\n    command: uvx\n    transport: STREAMABLE_HTTP\n",
        "2: mcpServers.git: transport STREAMABLE_HTTP needs url",
    ),
    (
        "mcpServers:\n  git:\n    command: uvx\n    transport: stdio\n",
        "4: transport must be STDIO or STREAMABLE_HTTP, not 'stdio'",
    ),
    (
        "mcpServers:\n  web:\n    url: ftp://files.example\n",
        "3: url must be an http or https URL, not 'ftp://files.example'",
    ),
    (  # a URL with no host is refused at load, not at the first sync
        "mcpServers:\n  web:\n    url: http:///mcp\n",
        "3: url must be an http or https URL, not 'http:///mcp'",
    ),
    (
        "mcpServers:\n  web:\n    url: file:///etc/passwd\n",
        "3: url must be an http or https URL, not 'file:///etc/passwd'",
    ),
    (
        "mcpServers:\n  'bad name':\n    command: uvx\n",
        "2: server name 'bad name': Use 1-100 letters, digits, dots, dashes or underscores, "
        "starting with a letter or digit.",
    ),
    ("mcpServers:\n  1: {command: uvx}\n", "2: keys in mcpServers must be strings, not a number"),
    (
        "mcpServers:\n  git:\n    command: 'uvx\n",
        "4: invalid YAML: while scanning a quoted scalar found unexpected end of stream",
    ),
    (
        "mcpServers:\n  git: {command: [uvx}\n",
        "2: invalid YAML: while parsing a flow sequence expected ',' or ']', but got '}'",
    ),
    (
        "mcpServers: {}\n---\nmcpServers: {}\n",
        "2: invalid YAML: expected a single document in the stream but found another document",
    ),
    (
        "mcpServers:\n  git:\n    command: uvx\n    <<: {args: [a]}\n",
        "4: merge keys (<<) are not supported in mcpServers.git: write each setting out",
    ),
    (
        "mcpServers:\n  git:\n    command: !!python/name:os.system uvx\n",
        "3: command must be a string, not a value tagged tag:yaml.org,2002:python/name:os.system",
    ),
]


@pytest.mark.parametrize(("text", "expected"), ERRORS)
def test_each_error_names_the_file_and_line_and_applies_nothing(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    before = state()

    with pytest.raises(CommandError) as raised:
        load(path)

    lines = str(raised.value).splitlines()
    assert lines == [f"{path}:{expected}", f"{path}: nothing was applied (1 error)"]
    assert state() == before


def test_every_error_of_a_file_is_reported_in_file_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        rules: []
        mcpServers:
          git:
            command: uvx
            annotationTrus: TRUST
          web:
            url: https://x.example
            annotationTrust: trust
            timeoutSeconds: 0
        """,
    )

    with pytest.raises(CommandError) as raised:
        load(path)

    assert str(raised.value).splitlines() == [
        f"{path}:1: unknown key 'rules' in the file (allowed: {TOP_KEYS})",
        f"{path}:5: unknown key 'annotationTrus' in mcpServers.git (allowed: {SERVER_KEYS})",
        f"{path}:8: annotationTrust must be IGNORE or TRUST, not 'trust'",
        f"{path}:9: timeoutSeconds must be a whole number from 1 to 600, not 0",
        f"{path}: nothing was applied (4 errors)",
    ]


def test_a_bad_last_server_leaves_the_database_as_it_was(tmp_path: Path) -> None:  # T13
    load(write(tmp_path, GOOD))
    services.mcp_tools_record(
        server=McpServer.objects.get(name="git"),
        listing=[{"name": "git_status", "annotations": {"readOnlyHint": True}}],
        actor=TEST_ACTOR,
        complete=True,
    )
    before = state()
    path = write(
        tmp_path,
        """\
        mcpServers:
          git:
            command: uvx
            annotationTrust: IGNORE
          search:
            url: https://search.example/v2
          fresh:
            command: fresh-mcp
          last:
            command: last-mcp
            annotationTrust: Trust
        """,
        "bad.yaml",
    )

    with pytest.raises(CommandError) as raised:
        load(path)

    assert (
        str(raised.value).splitlines()[0]
        == f"{path}:11: annotationTrust must be IGNORE or TRUST, not 'Trust'"
    )
    assert state() == before


def test_a_failure_while_applying_rolls_back_every_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whatever the checks miss and the model refuses, all of the file or none of it.
    load(write(tmp_path, GOOD))
    before = state()
    path = write(
        tmp_path,
        "mcpServers:\n  git: {command: changed}\n  fresh: {command: fresh-mcp}\n  huge: {command: x}\n",
        "apply.yaml",
    )
    real_create = services.mcp_server_create

    def refuse_huge(*, name: str, **kwargs: Any) -> McpServer:
        if name == "huge":
            from django.core.exceptions import ValidationError

            raise ValidationError("The command is refused.")
        return real_create(name=name, **kwargs)

    monkeypatch.setattr(services, "mcp_server_create", refuse_huge)

    with pytest.raises(CommandError) as raised:
        load(path)

    assert str(raised.value).splitlines() == [
        f"{path}:4: mcpServers.huge: The command is refused.",
        f"{path}: nothing was applied (1 error)",
    ]
    assert state() == before


def test_secret_values_are_never_echoed_in_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "mcpServers:\n  git:\n    command: uvx\n    env: {TOKEN: [hunter2]}\n")

    with pytest.raises(CommandError) as raised:
        load(path)

    assert str(raised.value).splitlines()[0] == f"{path}:4: env.TOKEN must be a string, not a list"
    assert "hunter2" not in str(raised.value)


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.yaml"

    with pytest.raises(CommandError) as raised:
        load(path)

    assert str(raised.value).splitlines()[0] == f"{path}: cannot read the file: No such file or directory"


def test_a_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"mcpServers:\n  git:\n    command: caf\xe9\n")

    with pytest.raises(CommandError) as raised:
        load(path)

    assert str(raised.value).startswith(f"{path}:3: invalid YAML: invalid continuation byte\n")
    assert not McpServer.objects.exists()
