"""A tool's subject argument (U1): the selector every tool decision reads, and the service
the tool page and load_config write through."""

from __future__ import annotations

import pytest

from aimon_admin.registry.models import ToolSubject
from aimon_admin.registry.selectors import subject_argument_for

pytestmark = pytest.mark.django_db


def test_no_subject_named_reads_as_empty() -> None:
    # U1: none by default.
    assert subject_argument_for("", "Bash") == ""
    assert subject_argument_for(None, "Bash") == ""


def test_subject_is_read_per_tool_and_server() -> None:
    ToolSubject.objects.create(server="", tool="Bash", argument="command")
    ToolSubject.objects.create(server="git", tool="git_push", argument="remote")
    assert subject_argument_for("", "Bash") == "command"
    assert subject_argument_for(None, "Bash") == "command"  # a local tool: no server
    assert subject_argument_for(server="git", tool="git_push") == "remote"
    # A local tool and an MCP tool of the same name are two tools.
    assert subject_argument_for("git", "Bash") == ""
    assert subject_argument_for("", "git_push") == ""
