"""Logging helpers: every log line carries the request id it belongs to."""

from __future__ import annotations

import logging

from aimon_admin.core.context import current_request_id


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id() or "-"
        return True
