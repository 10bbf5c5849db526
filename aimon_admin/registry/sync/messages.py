"""What an MCP sync tells operators: its progress lines and its one-line errors.

Constants, so the views show and the tests expect exactly these words.
"""

from __future__ import annotations

PROGRESS_CONNECTING = "Connecting…"
PROGRESS_LISTED = ("Listed {count} tool (page {page})…", "Listed {count} tools (page {page})…")
PROGRESS_STORING = ("Storing {count} tool…", "Storing {count} tools…")
PROGRESS_DONE = (
    "Done: {count} tool; {added} added, {changed} changed, {absent} absent.",
    "Done: {count} tools; {added} added, {changed} changed, {absent} absent.",
)
PROGRESS_FAILED = "Failed."
ERROR_NOT_QUEUED = (
    "Not started: the task queue (Redis) could not be reached, so no worker was asked to run "
    "this sync. Sync again once it is back."
)

STAGE_STARTING = "while starting the server"
STAGE_CONNECTING = "while connecting"
STAGE_INITIALIZE = "during initialize"
STAGE_PAGE = "on tools/list page {page}"
STAGE_SYNC = "while syncing"

ERROR_COMMAND_NOT_FOUND = "Command not found: {command}."
ERROR_COMMAND_FAILED = "Could not start {command}: {reason}."
ERROR_UNREACHABLE = "Unreachable: {url} ({reason})."
ERROR_TIMED_OUT = "Timed out after {seconds} s {stage}{detail}."
ERROR_CLOSED = "The server closed the connection {stage}{detail}."
ERROR_SERVER_ERROR = "The server answered with error {code} {stage}: {message}{detail}"
ERROR_PROTOCOL = "Protocol error {stage}: {detail}."
ERROR_TOO_MANY_TOOLS = "The server listed more than {limit} tools; nothing was stored."
ERROR_TOO_MANY_PAGES = "The listing ran past {limit} pages; nothing was stored."
ERROR_SECRETS_UNREADABLE = (
    "This server's stored env, headers or URL cannot be decrypted with the configured keys (a "
    "key was dropped too early, or the value was changed in the database), so nothing was sent "
    "to it: restore the key, or enter them again on its Edit page."
)
ERROR_DISABLED = "The server is disabled; nothing was fetched."
ERROR_STORE = "The listing could not be stored: {detail}"
ERROR_TIME_LIMIT = "Stopped: the sync ran past the task's time limit; nothing was stored."
ERROR_GAVE_UP = "Gave up after {attempts} attempts: the worker stopped each time."
ERROR_STALE = (
    "The worker running this sync stopped without a result (it stopped checking in), so "
    "nothing was stored. Sync again."
)
ERROR_UNEXPECTED = "Unexpected error {stage}: {detail}"
DETAIL_STDERR = "; stderr: {tail}"
DETAIL_NOT_JSON_RPC = "; it wrote output that is not JSON-RPC: {sample}"
DETAIL_HTTP_STATUS = " (HTTP {status})"
