"""MCP over the gateway's stdin and stdout without a thread per read and write (G2).

The SDK's stdio transport reads and writes its standard streams in worker threads: three
hand-offs between threads for every call the gateway serves, each a wake-up the operating
system must schedule (on a busy machine, much of what the gateway adds to a call). When both
are pipes or sockets, as an MCP client starts the gateway, they are read and written here,
non-blocking, on the event loop; anything else (a terminal, a file) keeps the SDK's transport.

Either way fd 0 and fd 1 are taken from the rest of the process while it serves: fd 0 reads
the null device and fd 1 writes to stderr, so nothing printed by accident (or by a child
process inheriting them) reaches the MCP wire.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.stdio import stdio_server

READ_CHUNK = 64 * 1024


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class PipeLines:
    """The lines of a non-blocking pipe, as text (undecodable bytes replaced, as the SDK's)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()
        self._scanned = 0  # bytes already known to hold no newline

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                self._scanned = 0
                return line.decode("utf-8", errors="replace")
            self._scanned = len(self._buffer)
            try:
                chunk = os.read(self.fd, READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)
                continue
            if not chunk:  # the client closed its end: a last unterminated line, then the end
                if self._buffer:
                    line, self._buffer, self._scanned = bytes(self._buffer), bytearray(), 0
                    return line.decode("utf-8", errors="replace")
                raise StopAsyncIteration
            self._buffer += chunk


class PipeWriter:
    """Text written whole to a non-blocking pipe; `flush` has nothing left to do."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def write(self, text: str) -> None:
        data = memoryview(text.encode("utf-8"))
        while data:
            try:
                data = data[os.write(self.fd, data) :]
            except BlockingIOError:
                await anyio.wait_writable(self.fd)

    async def flush(self) -> None:
        return None


@asynccontextmanager
async def serve_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) streams of MCP on stdin and stdout, as the SDK's `stdio_server`."""
    if not (_is_pipe(0) and _is_pipe(1)):
        async with stdio_server() as streams:
            yield streams
        return
    wire_in, wire_out = os.dup(0), os.dup(1)
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    os.set_blocking(wire_in, False)
    os.set_blocking(wire_out, False)
    try:
        async with stdio_server(stdin=PipeLines(wire_in), stdout=PipeWriter(wire_out)) as streams:  # type: ignore[arg-type]
            yield streams
    finally:
        os.close(wire_in)
        os.close(wire_out)
