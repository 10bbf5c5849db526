"""The runtime developer's guide (docs/api.md) says everything the tool API can answer and
takes: every reason a tool decision gives is in its table, and every field of a tool
approval request is in its section."""

from __future__ import annotations

import re
from pathlib import Path

from aimon_admin.approvals.api.serializers import ToolApprovalRequestIn
from aimon_admin.registry.choices import GateReason

GUIDE = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()


def _section(heading: str) -> str:
    start = GUIDE.index(heading)
    end = GUIDE.find("\n## ", start)
    return GUIDE[start:end]


def test_the_guide_lists_every_reason_a_tool_decision_gives_and_no_other() -> None:
    listed = re.findall(r"^\| `([A-Z_]+)` \|", _section("Every `reason` a tool decision can give"), re.M)
    assert sorted(listed) == sorted(GateReason.values)
    assert len(listed) == len(set(listed))


def test_the_guide_names_every_field_of_a_tool_approval_request() -> None:
    section = _section("### Asking a person about a tool call")
    named = set(re.findall(r"`([a-z_]+)`", section))
    assert set(ToolApprovalRequestIn().fields) - named == set()
