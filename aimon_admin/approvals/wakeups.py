"""Wake-ups for long-polls waiting on an approval request.

The database row is the truth; a wake-up is only a hint to re-read it sooner. With
REDIS_URL set, wake-ups go through Redis pub/sub, so a click on one node wakes a poll
waiting on another. Without it (the embedded default, one process) they go through an
in-process registry of asyncio events. A lost wake-up costs a short re-poll, never a
wrong answer.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections import defaultdict

from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)

CHANNEL_PREFIX = "aimon:approval-request:"


def channel_for(request_id: uuid.UUID | str) -> str:
    return f"{CHANNEL_PREFIX}{request_id}"


# --- In-process ---------------------------------------------------------------------------------

_lock = threading.Lock()
_waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = defaultdict(set)


def _local_publish(key: str) -> None:
    with _lock:
        waiters = list(_waiters.get(key, ()))
    for loop, event in waiters:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # that loop has closed: its waiter is gone
            continue


class LocalSubscription:
    def __init__(self, key: str) -> None:
        self.key = key
        self.event = asyncio.Event()
        self.entry = (asyncio.get_running_loop(), self.event)
        with _lock:
            _waiters[key].add(self.entry)

    async def wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        self.event.clear()
        return True

    async def close(self) -> None:
        with _lock:
            waiters = _waiters.get(self.key)
            if waiters is not None:
                waiters.discard(self.entry)
                if not waiters:
                    _waiters.pop(self.key, None)


# --- Redis --------------------------------------------------------------------------------------

_redis_client = None  # (url, client): a changed REDIS_URL (tests override it) gets its own client


def _redis():  # type: ignore[no-untyped-def]
    global _redis_client
    url = settings.REDIS_URL
    if _redis_client is None or _redis_client[0] != url:
        import redis

        _redis_client = (url, redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1))
    return _redis_client[1]


class RedisSubscription:
    """A pub/sub subscription; if Redis is down it degrades to plain sleeping (re-polls)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.client = None
        self.pubsub = None

    async def open(self) -> None:
        import redis.asyncio as aioredis

        try:
            self.client = aioredis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1)
            self.pubsub = self.client.pubsub()
            await self.pubsub.subscribe(self.key)
        except Exception as exc:  # Redis down: fall back to polling the database
            logger.warning("wake-ups unavailable, polling instead: %s", exc)
            self.pubsub = None

    async def wait(self, timeout: float) -> bool:
        if self.pubsub is None:
            await asyncio.sleep(timeout)
            return False
        try:
            message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=timeout)
        except Exception as exc:
            logger.warning("wake-up subscription lost, polling instead: %s", exc)
            self.pubsub = None
            return False
        return message is not None

    async def close(self) -> None:
        # The client too: each subscription has its own connection pool.
        for closable in (self.pubsub, self.client):
            if closable is None:
                continue
            try:
                await closable.aclose()
            except Exception as exc:
                logger.debug("closing a wake-up subscription: %s", exc)


async def subscribe(request_id: uuid.UUID | str) -> LocalSubscription | RedisSubscription:
    """Subscribe before reading the row, so a wake-up between the read and the wait is kept."""
    key = channel_for(request_id)
    if settings.REDIS_URL:
        subscription = RedisSubscription(key)
        await subscription.open()
        return subscription
    return LocalSubscription(key)


def publish(request_id: uuid.UUID | str) -> None:
    key = channel_for(request_id)
    if settings.REDIS_URL:
        try:
            _redis().publish(key, b"1")
        except Exception as exc:  # the waiter re-reads the row on its own soon enough
            logger.warning("could not publish a wake-up for %s: %s", request_id, exc)
        return
    _local_publish(key)


def publish_after_commit(request_id: uuid.UUID | str) -> None:
    """Wake waiters once the change they should see is committed."""
    transaction.on_commit(lambda: publish(request_id))
