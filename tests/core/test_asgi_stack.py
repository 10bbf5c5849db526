"""The middleware stack runs in sync mode under ASGI: a few thread hops per request."""

from __future__ import annotations

import asyncio

import pytest
from asgiref import sync

from aimon_admin.asgi import application


async def _get(path: str) -> int:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }
    done = asyncio.Event()
    statuses: list[int] = []

    async def receive() -> dict:
        if not done.is_set():
            done.set()
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(60)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await application(scope, receive, send)
    return statuses[0]


@pytest.mark.django_db(transaction=True)
def test_a_request_crosses_to_a_thread_only_a_few_times(monkeypatch: pytest.MonkeyPatch) -> None:
    # With Django's middlewares in async mode (each hook through sync_to_async) and a
    # sync-only one in the middle, a request took 15 thread hops; the sync stack takes 3
    # (the stack, the view, the request_finished signal) plus request_started.
    hops: list[object] = []
    real_init = sync.SyncToAsync.__init__

    def counting_init(self: sync.SyncToAsync, func: object, *args: object, **kwargs: object) -> None:
        hops.append(func)
        real_init(self, func, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__init__", counting_init)
    assert asyncio.run(_get("/healthz")) == 200
    assert 1 <= len(hops) <= 5, hops
