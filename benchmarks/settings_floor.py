"""The benchmarks' settings with no middleware and one view that answers every path: Django's
own request path, and nothing else (benchmarks/floor.py)."""

from __future__ import annotations

from benchmarks.settings import *  # noqa: F403

MIDDLEWARE: list[str] = []
ROOT_URLCONF = "benchmarks.floor_apps"
