"""AIMON Admin's enforcement points for agent runtimes (G1-G3)."""

from __future__ import annotations

__version__ = "0.1.0"
