"""Ports for the servers (and the deliberately closed addresses) the tests use, handed out so
that two can never collide.

Asking the system for a free port (bind to port 0, close, start a server there) leaves a
moment in which anything else may take it: the other suite run beside this one (`make test`
runs SQLite and PostgreSQL at once), or the next port the system hands out. Instead each run
takes ports from its own block (AIMON_TEST_PORT_BASE, set per run by scripts/run_tests.py),
below the system's ephemeral range (32768 and up on Linux), so no outgoing connection is given
one either; a port is handed out once per run, and one found in use is passed over.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading

BASE = int(os.environ.get("AIMON_TEST_PORT_BASE", "24000"))
SPAN = 2000

_offsets = itertools.count()
_lock = threading.Lock()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on and that this run has not handed out before."""
    while True:
        with _lock:
            offset = next(_offsets)
        if offset >= SPAN:
            raise RuntimeError(f"this run used all {SPAN} test ports from {BASE}")
        port = BASE + offset
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken by something outside the run: the next one
        return port
