"""Wake-ups for long-polls waiting on an approval request.

The database row is the truth; a wake-up is only a hint to re-read it. With REDIS_URL set,
wake-ups go through Redis pub/sub, so a click on one node wakes a poll waiting on another.
Without it (the embedded default, one process) they go through an in-process registry of
asyncio events.

A waiter subscribes first, then reads the row once, then waits: a wake-up published between
the read and the wait is kept by the subscription, so none is lost. (For Redis the
subscription counts only once Redis has confirmed it: a SUBSCRIBE still in flight would let
a PUBLISH overtake it.) While wake-ups are known to arrive, a waiter re-reads its row only
when woken, at expiry or at its deadline, never on a timer: 1,000 idle waiters cost no
database work. `repoll_after` says how often a waiter must re-read because wake-ups may not
come: never for a live Redis subscription (its connection is checked with a PING every
`HEALTH_CHECK_SECONDS`, and a dead one is noticed); `REPOLL_SECONDS` once Redis is
unreachable (the waiter polls the row instead, and tries to subscribe again with a back-off
from `RESUBSCRIBE_FIRST_SECONDS` to `RESUBSCRIBE_MAX_SECONDS`); `REPOLL_SECONDS` in process
too, where a click served by another process without Redis would never wake it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections import defaultdict

from django.conf import settings
from django.db import transaction

from aimon_admin.core import hints, hooks

logger = logging.getLogger(__name__)

# Without working wake-ups a waiter re-reads its row this often: the embedded target
# (answer to unblocked ≤ 1.5 s) holds even then.
REPOLL_SECONDS = 1.0
# A live subscription's connection is PINGed when it has been quiet this long; no PONG
# within PONG_TIMEOUT_SECONDS and it is taken for dead (the waiter then polls).
HEALTH_CHECK_SECONDS = 10.0
PONG_TIMEOUT_SECONDS = 2.0
# Redis unreachable: the next try to subscribe again waits this long, doubling up to the max.
RESUBSCRIBE_FIRST_SECONDS = 1.0
RESUBSCRIBE_MAX_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 1.0

CHANNEL_PREFIX = "aimon:approval-request:"


def channel_for(request_id: uuid.UUID | str) -> str:
    return f"{CHANNEL_PREFIX}{request_id}"


def client_name_for(request_id: uuid.UUID | str) -> str:
    """The name a waiter's Redis connection carries (CLIENT LIST shows who waits on what)."""
    return f"aimon-wait-{request_id}"


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
    """In process: wakes on a click served by this process; re-reads on a timer for the rest."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.event = asyncio.Event()
        self.entry = (asyncio.get_running_loop(), self.event)
        with _lock:
            _waiters[key].add(self.entry)

    @property
    def repoll_after(self) -> float | None:
        return REPOLL_SECONDS

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
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # One retry at once (a connection Redis closed while idle is opened again), not
        # redis-py's ten with back-off: seconds spent on a Redis that is down.
        client = redis.Redis.from_url(
            url, socket_connect_timeout=1, socket_timeout=1, retry=Retry(NoBackoff(), 1)
        )
        _redis_client = (url, client)
    return _redis_client[1]


class RedisSubscription:
    """A pub/sub subscription of its own; if Redis is unreachable, the waiter polls the row
    and this tries to subscribe again, with a back-off."""

    def __init__(self, key: str, name: str) -> None:
        self.key = key
        self.name = name
        self.client = None
        self.pubsub = None
        self.retry_in = RESUBSCRIBE_FIRST_SECONDS
        self.retry_at = 0.0

    @property
    def live(self) -> bool:
        return self.pubsub is not None

    @property
    def repoll_after(self) -> float | None:
        return None if self.live else REPOLL_SECONDS

    async def open(self) -> bool:
        """Subscribe, and return once Redis has confirmed it (True), or False if it cannot."""
        import redis.asyncio as aioredis

        loop = asyncio.get_running_loop()
        try:
            self.client = aioredis.Redis.from_url(
                settings.REDIS_URL,
                socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
                socket_timeout=PONG_TIMEOUT_SECONDS,
                client_name=self.name,
            )
            self.pubsub = self.client.pubsub()
            await self.pubsub.subscribe(self.key)
            confirmed = await self.pubsub.get_message(timeout=PONG_TIMEOUT_SECONDS)
            if confirmed is None or confirmed.get("type") != "subscribe":
                raise ConnectionError(f"no confirmation of the subscription: {confirmed!r}")
        except Exception as exc:  # Redis unreachable: the waiter polls the database instead
            logger.warning("wake-ups unavailable, polling instead: %s", exc)
            await self._drop()
            self.retry_at = loop.time() + self.retry_in
            self.retry_in = min(self.retry_in * 2, RESUBSCRIBE_MAX_SECONDS)
            return False
        self.retry_in = RESUBSCRIBE_FIRST_SECONDS
        return True

    async def wait(self, timeout: float) -> bool:
        """True if woken; False after `timeout`, or at once when the subscription is lost
        (the waiter then re-reads, so nothing published meanwhile is missed)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self.pubsub is None:
            await asyncio.sleep(max(deadline - loop.time(), 0))
            if loop.time() >= self.retry_at:
                await self.open()  # subscribed again before the waiter's next read
            return False
        try:
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    return False
                message = await self.pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=min(left, HEALTH_CHECK_SECONDS)
                )
                if message is not None and message.get("type") == "message":
                    return True
                if message is None and left > HEALTH_CHECK_SECONDS and await self._check_alive():
                    return True
        except Exception as exc:
            logger.warning("wake-up subscription lost, polling instead: %s", exc)
            await self._drop()
            self.retry_at = loop.time() + self.retry_in
            return False

    async def _check_alive(self) -> bool:
        """PING the quiet connection: False on its PONG, True if a wake-up comes first (the
        connection is alive then too); raises if neither comes in time."""
        if self.pubsub is None:
            raise ConnectionError("no subscription to check")  # the caller falls back to polling
        await self.pubsub.ping()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PONG_TIMEOUT_SECONDS
        while (left := deadline - loop.time()) > 0:
            message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
            if message is None:
                continue
            if message.get("type") == "pong":
                return False
            if message.get("type") == "message":
                return True
        raise ConnectionError(f"no PONG within {PONG_TIMEOUT_SECONDS:.0f} s")

    async def _drop(self) -> None:
        pubsub, client = self.pubsub, self.client
        self.pubsub = self.client = None
        # The client too: each subscription has its own connection pool.
        for closable in (pubsub, client):
            if closable is None:
                continue
            try:
                await closable.aclose()
            except Exception as exc:
                logger.debug("closing a wake-up subscription: %s", exc)

    async def close(self) -> None:
        await self._drop()


async def subscribe(request_id: uuid.UUID | str) -> LocalSubscription | RedisSubscription:
    """Subscribe before reading the row, so a wake-up between the read and the wait is kept."""
    key = channel_for(request_id)
    if settings.REDIS_URL:
        subscription = RedisSubscription(key, client_name_for(request_id))
        await subscription.open()
        return subscription
    return LocalSubscription(key)


def publish_after_commit(request_id: uuid.UUID | str) -> None:
    """Wake waiters once the change they should see is committed, and tell whoever listens
    for changed requests (notifications: core.hooks, so approvals imports no listener).
    Through Redis the wake-up is a hint (`core.hints`): published off the request's thread in
    production, so a Redis that is down never holds the click that answered."""
    key = channel_for(request_id)
    if settings.REDIS_URL:
        transaction.on_commit(
            lambda: hints.send_soon(f"the wake-up for {request_id}", lambda: _redis().publish(key, b"1"))
        )
    else:
        transaction.on_commit(lambda: _local_publish(key))
    hooks.announce_after_commit(hooks.REQUEST_CHANGED, request_id)
