"""`make screenshots`: scripts/screenshots.py, run into a temporary folder, writes every
screenshot the README shows, each a real PNG of the expected size, and leaves neither its
server nor its database behind.

The script always runs on its own temporary SQLite database, so the test runs once, on the
SQLite run; tests/browser/conftest.py deselects it on the PostgreSQL run.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from scripts import screenshots
from tests.browser.conftest import CHROMIUM
from tests.conftest import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SHOTS_DIR = ROOT / "docs" / "screenshots"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's header (its first chunk must be IHDR)."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    assert head[12:16] == b"IHDR", f"{path.name} has no IHDR first"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def leftovers() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("aimon-screenshots-*")}


def test_make_screenshots_writes_every_readme_screenshot_as_a_png_of_its_size(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        skip_or_fail(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    before = leftovers()
    mine = [ROOT / "db.sqlite3", ROOT / ".demo-credentials.json"]
    user_files = {path: path.stat().st_mtime_ns for path in mine if path.exists()}
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}

    done = subprocess.run(
        [sys.executable, "scripts/screenshots.py", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.png"))
    assert written == sorted(screenshots.SHOTS)
    for name, device in screenshots.SHOTS.items():
        path = tmp_path / name
        width, height = png_size(path)
        viewport = device["viewport"]
        if device is screenshots.PHONE:  # one phone screen, as seen
            assert (width, height) == (390, 844), name
        else:  # the whole desktop page, at most MAX_HEIGHT tall
            assert width == 1280, name
            assert viewport["height"] <= height <= screenshots.MAX_HEIGHT, (name, height)
        # The inbox, four cards long, is clipped at MAX_HEIGHT: about 400 KB.
        assert path.stat().st_size < 500 * 1024, f"{name} is {path.stat().st_size // 1024} KB"
    # The temporary database and server are gone; the developer's own files were not touched.
    assert leftovers() == before
    assert {path: path.stat().st_mtime_ns for path in user_files} == user_files


def referenced_pictures() -> set[str]:
    """Every picture under docs/screenshots/ the README, the tour (docs/tour.md) or
    docs/screenshots/README.md shows, as a path relative to docs/screenshots/."""
    found = set(re.findall(r"docs/screenshots/([\w./-]+\.png)", (ROOT / "README.md").read_text()))
    found |= set(
        re.findall(r'(?:src="|\]\()screenshots/([\w.-]+\.png)', (ROOT / "docs" / "tour.md").read_text())
    )
    listing = (SHOTS_DIR / "README.md").read_text()
    found |= set(re.findall(r'(?:src="|\]\()((?:before-after/)?[\w.-]+\.png)', listing))
    return found


def test_the_readme_shows_exactly_the_pictures_in_docs_screenshots() -> None:
    # No link to a picture that is not there, no picture nobody shows, and every picture the
    # tour takes is one the README shows.
    on_disk = {str(path.relative_to(SHOTS_DIR)) for path in SHOTS_DIR.rglob("*.png")}
    shown = referenced_pictures()
    assert shown - on_disk == set(), "referenced but missing"
    assert on_disk - shown == set(), "in docs/screenshots but shown nowhere"
    assert set(screenshots.SHOTS) <= on_disk
    pairs = {
        name.removeprefix("before-after/").rsplit("-", 1)[0] for name in on_disk if "before-after/" in name
    }
    assert pairs == {"operator-home", "audit-log", "phone-nav", *screenshots.FIXED}
    for stem in pairs:  # each a pair
        assert {f"before-after/{stem}-before.png", f"before-after/{stem}-after.png"} <= on_disk, stem
