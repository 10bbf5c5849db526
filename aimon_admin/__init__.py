"""AIMON Admin: the control plane for what AI agent runtimes may do."""

from __future__ import annotations

from aimon_admin.celery import app as celery_app

__all__ = ["celery_app"]
