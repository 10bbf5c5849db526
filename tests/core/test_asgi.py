"""The ASGI body limit: chunked bodies over 1 MiB are refused with 413 (docs/api.md)."""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any

from aimon_admin.asgi import application


def drive(
    path: str,
    chunks: list[bytes],
    headers: list[tuple[bytes, bytes]] | None = None,
    method: str = "POST",
) -> dict[str, Any]:
    """Send a request through the real ASGI application the way a server would."""
    incoming = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"), *(headers or [])],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }
    asyncio.run(application(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return {"status": start["status"], "body": body}


def test_a_chunked_body_over_the_limit_is_413_json() -> None:
    result = drive("/api/v1/runtime", [b"a" * 600_000, b"a" * 600_000])
    assert result["status"] == 413
    assert json.loads(result["body"]) == {
        "error": "payload_too_large",
        "detail": "Request body is larger than the 1 MiB limit.",
    }


def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    result = drive("/api/v1/runtime", [b""], headers=[(b"content-length", b"5000000")])
    assert result["status"] == 413


def test_a_small_chunked_body_passes_through() -> None:
    result = drive("/api/v1/no-such-endpoint", [b"{", b"}"])
    assert result["status"] == 404
    assert json.loads(result["body"])["error"] == "not_found"


def test_static_files_under_asgi_are_sent_without_a_warning() -> None:
    # make run: uvicorn serves the static files too, from the source folders.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = drive("/static/css/app.css", [b""], method="GET")
    assert result["status"] == 200
    assert b".facts" in result["body"]
    assert [str(w.message) for w in caught if "StreamingHttpResponse" in str(w.message)] == []
