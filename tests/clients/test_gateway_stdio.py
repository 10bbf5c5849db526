"""The gateway's stdio transport (G2): MCP messages read and written whole on non-blocking
pipes, and nothing but MCP on the wire."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import anyio
import pytest
from aimon_client.gateway.stdio import PipeLines, PipeWriter

BIG = 5 * 1024 * 1024  # a 5 MB message: far past a pipe's buffer


def _pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    return read_end, write_end


def _write_slowly(fd: int, pieces: list[bytes]) -> None:
    with os.fdopen(fd, "wb", buffering=0) as out:
        os.set_blocking(fd, True)
        for piece in pieces:
            out.write(piece)
            time.sleep(0.01)


def test_lines_split_across_reads_come_whole_and_the_last_unterminated_one_too() -> None:  # G2
    read_end, write_end = _pipe()
    pieces = [b'{"a":', b' 1}\n{"b"', b": 2}\n\xff\n", b"x" * BIG + b"\n", b"tail"]
    writer = threading.Thread(target=_write_slowly, args=(write_end, pieces))

    async def read_all() -> list[str]:
        return [line async for line in PipeLines(read_end)]

    writer.start()
    try:
        lines = anyio.run(read_all)
    finally:
        writer.join()
        os.close(read_end)
    assert lines[:3] == ['{"a": 1}\n', '{"b": 2}\n', "\ufffd\n"]  # undecodable bytes replaced
    assert lines[3] == "x" * BIG + "\n"
    assert lines[4:] == ["tail"]


def test_a_message_larger_than_the_pipe_is_written_whole() -> None:  # G2
    read_end, write_end = _pipe()
    received = bytearray()

    def drain() -> None:
        os.set_blocking(read_end, True)
        while chunk := os.read(read_end, 65536):
            received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()

    async def write() -> None:
        out = PipeWriter(write_end)
        await out.write("é" * (BIG // 2) + "\n")
        await out.flush()

    try:
        anyio.run(write)
    finally:
        os.close(write_end)
        reader.join()
        os.close(read_end)
    assert received.decode() == "é" * (BIG // 2) + "\n"


ECHO = """
import os, sys, anyio
from aimon_client.gateway.stdio import serve_stdio

async def main():
    async with serve_stdio() as (read, write):
        print("stray print")
        os.write(1, b"stray write to fd 1\\n")
        message = await read.receive()
        await write.send(message)
        await write.aclose()

anyio.run(main)
"""


@pytest.mark.parametrize("stdin_kind", ["pipe", "socket"])
def test_only_mcp_reaches_the_wire_and_stray_output_goes_to_stderr(stdin_kind: str) -> None:  # G2
    request = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    if stdin_kind == "socket":
        import socket

        ours, theirs = socket.socketpair()
        ours.sendall((json.dumps(request) + "\n").encode())
        ours.shutdown(socket.SHUT_WR)
        stdin = theirs
    else:
        stdin = subprocess.PIPE
    process = subprocess.Popen(
        [sys.executable, "-c", ECHO],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    if stdin_kind == "socket":
        theirs.close()
        out, err = process.communicate(timeout=60)
        ours.close()
    else:
        out, err = process.communicate((json.dumps(request) + "\n").encode(), timeout=60)
    assert process.returncode == 0, err.decode()
    assert [json.loads(line) for line in out.decode().splitlines()] == [request]
    assert b"stray print" in err
    assert b"stray write to fd 1" in err
