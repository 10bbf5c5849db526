"""What nginx itself answers, in front of the servers, is in the product's words: the API's
paths (/api/, /access/, /.well-known/) get the API's JSON error body for every status nginx
produces on its own (a header too large, an address too long, a path it cannot read, a body
over the limit, a server behind it down), and the pages a page. nginx runs for real, with the
configuration `make prod` writes, and nothing behind it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aimon_admin.core.api import UNAVAILABLE_MESSAGE
from aimon_admin.core.middleware import BODY_TOO_LARGE_MESSAGE
from tests.ports import free_port
from tests.production.test_launch import NGINX, prod_module, production_env


@pytest.fixture(scope="module")
def proxy() -> Iterator[int]:
    """nginx alone on a port of its own, configured as `make prod` configures it."""
    if NGINX is None:
        from tests.conftest import skip_or_fail

        skip_or_fail("nginx is not installed: apt-get install -y nginx")
    prod = prod_module()
    port = free_port()
    # nginx's workers run as another user when the tests run as root: a folder they can enter.
    run_dir = Path(tempfile.mkdtemp(prefix="aimon-nginx-", dir="/tmp"))
    run_dir.chmod(0o755)
    env = production_env("postgres://aimon@db.invalid:5432/aimon", "redis://r.invalid:6379/0", port, run_dir)
    config = prod.config_from(dict(env, AIMON_NGINX=str(NGINX), AIMON_RUN_DIR=str(run_dir / "run")))
    prod.write_nginx_conf(config)
    process = subprocess.Popen(prod.nginx_argv(config), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"nginx did not start: {process.stderr.read()!r}") from None  # type: ignore[union-attr]
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(10)


def raw(port: int, request: bytes) -> tuple[int, str, bytes]:
    """Send bytes as they are (no client library tidies them) and read the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers.get("Content-Type", ""), body


def get(path: str, *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


BIG_HEADER = "X-Padding: " + "a" * 64 * 1024
LONG_KEY = "Idempotency-Key: " + "k" * 10_000


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (get("/api/v1/runtime", BIG_HEADER), 400),
        (get("/api/v1/approval-requests", LONG_KEY), 400),
        (get("/access/v1/evaluation", BIG_HEADER), 400),
        (get("/.well-known/authzen-configuration", BIG_HEADER), 400),
        (get("/api/v1/%00"), 400),
        (get("/api/v1/" + "a" * 20_000), 414),
        (b"POST /api/v1/skill-decisions HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n", 413),
        (get("/api/v1/runtime"), 503),
        (b"NOT-HTTP\r\n\r\n", 400),
    ],
    ids=[
        "64k-header",
        "10k-idempotency-key",
        "access",
        "well-known",
        "nul",
        "long-uri",
        "body",
        "down",
        "garbage",
    ],
)
def test_the_api_gets_json_for_whatever_nginx_refuses(proxy: int, request_bytes: bytes, status: int) -> None:
    got, content_type, body = raw(proxy, request_bytes)
    assert got == status, body
    assert content_type == "application/json", body
    answer = json.loads(body)
    assert set(answer) == {"error", "detail"}
    if status == 413:
        assert answer["detail"] == BODY_TOO_LARGE_MESSAGE
    if status == 503:
        assert answer["detail"] == UNAVAILABLE_MESSAGE


def test_a_page_gets_a_page(proxy: int) -> None:
    status, content_type, body = raw(proxy, get("/approvals/", BIG_HEADER))
    assert (status, content_type) == (400, "text/html")
    assert b"<title>Bad request</title>" in body
    # The refusals' own addresses are nginx's alone: from outside, nothing is there.
    status, content_type, _ = raw(proxy, get("/_aimon_refusal/api_400"))
    assert (status, content_type) == (404, "text/html")


def test_the_configuration_names_every_refusal_once() -> None:
    prod = prod_module()
    env = production_env(
        "postgres://aimon@db.invalid:5432/aimon", "redis://r.invalid:6379/0", 8123, Path("/tmp")
    )
    conf = prod.nginx_conf(prod.config_from(dict(env, AIMON_NGINX=sys.executable)))
    for code, *_ in prod.NGINX_REFUSALS:
        assert conf.count(f"error_page {code} ") == 1, code
        assert f"location = /_aimon_refusal/api_{code} " in conf
        assert f"location = /_aimon_refusal/page_{code} " in conf
    assert os.path.basename(sys.executable)  # the configuration is only written, not run, here
