"""Accessibility checks in the browser: axe-core, injected into the page under test.

axe-core comes bundled in the axe-playwright-python wheel (no download at run time). A page
passes when axe finds no violation of impact *serious* or *critical* against WCAG 2.x A and
AA; lesser findings are returned for whoever wants to look at them.
"""

from __future__ import annotations

from typing import Any

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Page

BLOCKING = frozenset({"serious", "critical"})
# WCAG 2.0, 2.1 and 2.2 at levels A and AA, plus axe's best practices.
OPTIONS: dict[str, Any] = {
    "resultTypes": ["violations"],
    "runOnly": {
        "type": "tag",
        "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"],
    },
}

_axe = Axe()


def violations(page: Page) -> list[dict[str, Any]]:
    """Every axe violation on the page as it is now (after any htmx swaps)."""
    return list(_axe.run(page, options=OPTIONS).response["violations"])


def describe(found: list[dict[str, Any]]) -> str:
    lines = []
    for violation in found:
        lines.append(f"{violation['id']} ({violation['impact']}): {violation['help']}")
        for node in violation["nodes"][:5]:
            target = " ".join(map(str, node["target"]))
            lines.append(f"    {target}: {node.get('failureSummary', '').strip()}")
        if len(violation["nodes"]) > 5:
            lines.append(f"    ... and {len(violation['nodes']) - 5} more")
    return "\n".join(lines)


def assert_accessible(page: Page, what: str = "") -> list[dict[str, Any]]:
    """Fail on any serious or critical violation; return the lesser ones."""
    found = violations(page)
    blocking = [v for v in found if v["impact"] in BLOCKING]
    assert not blocking, f"axe-core on {what or page.url}:\n{describe(blocking)}"
    return [v for v in found if v["impact"] not in BLOCKING]
