"""Logging helpers: every log line carries the request id it belongs to, and a refused
request is one line, not a traceback."""

from __future__ import annotations

import logging

from aimon_admin.core.context import current_request_id


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id() or "-"
        return True


class ClientErrorWithoutTraceback(logging.Filter):
    """A 4xx logged by Django (a 403 from a role check, a 400 for a bad host) loses its
    traceback: Django passes the exception it answered, and the log then held a full stack
    for every refusal, which is the product working, not failing. The line itself stays
    (status, path, request id). A 5xx, or any record with no status, keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500 and record.exc_info:
            record.exc_info = None
            record.exc_text = None
        return True
