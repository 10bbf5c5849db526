"""The documentation stays inside the repository: every link in README.md and docs/ points to
a file of the repository that exists (and, for a heading, a heading that exists), and none
leaves it — no web address, no path above the repository (a clone has nothing there)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML = re.compile(r"""\b(?:src|href)=["']([^"']+)["']""")
_BARE = re.compile(r"\b(?:https?|ftp)://\S+|(?<![\w/])www\.\S+")


def _prose(text: str) -> str:
    """The page without its code: what a reader sees as text and links."""
    return _CODE.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text())
    return {slug(match) for match in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def test_there_are_pages_to_check() -> None:
    names = {page.relative_to(ROOT).as_posix() for page in PAGES}
    assert {"README.md", "docs/README.md", "docs/operations.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=[page.relative_to(ROOT).as_posix() for page in PAGES])
def test_every_link_stays_in_the_repository_and_resolves(page: Path) -> None:
    prose = _prose(page.read_text())
    problems = [f"a web address in the text: {url}" for url in _BARE.findall(prose)]
    for target in [*_LINK.findall(prose), *_HTML.findall(prose)]:
        if re.match(r"^[a-z][a-z0-9+.-]*:|^//", target, re.I):
            problems.append(f"{target}: leaves the repository")
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if ROOT not in (resolved, *resolved.parents):
            problems.append(f"{target}: above the repository")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: no heading #{anchor} there")
    assert problems == []
