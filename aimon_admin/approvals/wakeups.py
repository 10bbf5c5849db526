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
unreachable (the waiter polls the row instead, and the subscription is tried again with a
back-off from `RESUBSCRIBE_FIRST_SECONDS` to `RESUBSCRIBE_MAX_SECONDS`); `REPOLL_SECONDS` in
process too, where a click served by another process without Redis would never wake it.

The waiters of one event loop (of one uvicorn process) share one Redis connection, their
`RedisHub`: a thousand waiters cost Redis one client and one SUBSCRIBE each, not a thousand
connections, each with its own handshake and PINGs.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import uuid
import weakref
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.db import transaction

from aimon_admin.core import hints, hooks, metrics

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


class _Waiter:
    """What both kinds of subscription share: an event set when the waiter should re-read."""

    event: asyncio.Event

    async def wait(self, timeout: float) -> bool:
        """True if woken (through Redis also by the hub's loss or return); False after `timeout`."""
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        self.event.clear()
        return True


class LocalSubscription(_Waiter):
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


def _redis_failed(message: str, exc: BaseException) -> None:
    """The hub's connection failed or was lost: logged and counted (its waiters poll)."""
    logger.warning(message, exc)
    metrics.REDIS_ERRORS.labels("wakeups").inc()


class RedisHub:
    """One pub/sub connection for every waiter of an event loop (under uvicorn, of the
    process): a channel is subscribed while someone waits on it, each message wakes that
    channel's waiters, and a waiter counts as subscribed once Redis has confirmed its channel.

    Lost (an error, or no PONG in time), every waiter is woken to re-read and then polls;
    the hub connects again after `retry_in` (from RESUBSCRIBE_FIRST_SECONDS, doubling to
    RESUBSCRIBE_MAX_SECONDS while it fails) and subscribes every channel still waited on,
    each confirmation waking that channel's waiters once more: whatever was published while
    it was gone is read then. With nobody waiting through a quiet `HEALTH_CHECK_SECONDS`, it
    closes its connection.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = f"aimon-wait-{os.getpid()}-{next(_hub_numbers)}"
        self.waiters: dict[str, set[RedisSubscription]] = {}
        self.confirmed: set[str] = set()
        self.confirming: dict[str, asyncio.Future[bool]] = {}
        self.connection: Any = None  # a redis.asyncio Connection while connected
        self.connecting: asyncio.Future[bool] | None = None  # while an attempt to connect runs
        self.task: asyncio.Task[None] | None = None
        self.background: set[asyncio.Task[Any]] = set()
        self.retry_in = RESUBSCRIBE_FIRST_SECONDS
        self.retry_at = 0.0

    def live(self, key: str) -> bool:
        return self.connection is not None and key in self.confirmed

    async def add(self, subscription: RedisSubscription) -> None:
        """Count `subscription` in; return once Redis has confirmed its channel, or as soon as
        it is clear that it will not in time (the waiter polls until it does). Whatever woke
        it meanwhile is dropped (`subscribe`): the waiter's first read comes next, and sees it."""
        loop = asyncio.get_running_loop()
        key = subscription.key
        self.waiters.setdefault(key, set()).add(subscription)
        if self.task is None:
            if loop.time() >= self.retry_at:
                self.connecting = loop.create_future()
            # else Redis failed a moment ago: the hub tries again once its back-off is over
            self.task = loop.create_task(self._run())
        if self.connection is None:
            attempt = self.connecting
            if attempt is None or not await asyncio.shield(attempt):
                return
        if key in self.confirmed:
            return
        confirmation = self.confirming.get(key)
        if confirmation is None:
            confirmation = self.confirming[key] = loop.create_future()
            if not await self._send("SUBSCRIBE", key):
                return
        try:
            await asyncio.wait_for(asyncio.shield(confirmation), PONG_TIMEOUT_SECONDS)
        except TimeoutError:
            logger.warning("wake-ups unavailable, polling instead: no confirmation of %s", key)

    async def remove(self, subscription: RedisSubscription) -> None:
        key = subscription.key
        waiters = self.waiters.get(key)
        if waiters is None:
            return
        waiters.discard(subscription)
        if waiters:
            return
        del self.waiters[key]
        if key in self.confirmed:
            self.confirmed.discard(key)
            await self._send("UNSUBSCRIBE", key)
        # A SUBSCRIBE still unconfirmed is undone when its confirmation comes.

    async def _send(self, *command: str) -> bool:
        connection = self.connection
        if connection is None:
            return False
        try:
            await connection.send_command(*command, check_health=False)
        except Exception as exc:
            _redis_failed("wake-up subscription lost, polling instead: %s", exc)
            if self.connection is connection:
                self._background(_disconnect(self._drop()))  # its listener fails on it too
            return False
        return True

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self.waiters:
                if (delay := self.retry_at - loop.time()) > 0:
                    await asyncio.sleep(delay)
                    if not self.waiters:
                        break
                attempt = self.connecting = self.connecting or loop.create_future()
                try:
                    connection = await self._connect()
                except Exception as exc:
                    _redis_failed("wake-ups unavailable, polling instead: %s", exc)
                    self.connecting = None
                    attempt.set_result(False)
                    self.retry_at = loop.time() + self.retry_in
                    self.retry_in = min(self.retry_in * 2, RESUBSCRIBE_MAX_SECONDS)
                    continue
                self.connection, self.retry_in = connection, RESUBSCRIBE_FIRST_SECONDS
                channels = list(self.waiters)
                for key in channels:
                    self.confirming.setdefault(key, loop.create_future())
                try:
                    if channels:
                        await connection.send_command("SUBSCRIBE", *channels, check_health=False)
                    self.connecting = None
                    attempt.set_result(True)
                    await self._listen(connection)
                except Exception as exc:
                    _redis_failed("wake-up subscription lost, polling instead: %s", exc)
                    self.retry_at = loop.time() + self.retry_in
                finally:
                    if self.connection is connection:
                        self._drop()
                    if not attempt.done():
                        self.connecting = None
                        attempt.set_result(False)
                    await _disconnect(connection)
        finally:
            self.task = None
            if self.connection is not None:
                self._background(_disconnect(self._drop()))
            if self.connecting is not None:
                self.connecting.set_result(False)
                self.connecting = None

    async def _connect(self) -> Any:
        import redis.asyncio as aioredis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        pool = aioredis.ConnectionPool.from_url(
            self.url,
            socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
            socket_timeout=PONG_TIMEOUT_SECONDS,
            client_name=self.name,
            retry=Retry(NoBackoff(), 0),  # a failure is the hub's to handle, with its back-off
            # RESP2: messages are plain replies, read in turn. (Under RESP3 they are pushes,
            # which redis-py's parser hands on by recursing: a burst overflows the stack.)
            protocol=2,
        )
        connection = pool.make_connection()
        try:
            await asyncio.wait_for(connection.connect(), CONNECT_TIMEOUT_SECONDS + PONG_TIMEOUT_SECONDS)
        except BaseException:
            await _disconnect(connection)
            raise
        return connection

    async def _listen(self, connection: Any) -> None:
        """Route what Redis sends until the connection fails (raises) or nobody waits (returns)."""
        loop = asyncio.get_running_loop()
        pinged_at: float | None = None
        while True:
            quiet = (
                HEALTH_CHECK_SECONDS if pinged_at is None else pinged_at + PONG_TIMEOUT_SECONDS - loop.time()
            )
            reply = await connection.read_response(timeout=max(quiet, 0.0), disconnect_on_error=False)
            if reply is None:  # nothing came for `quiet` seconds
                if pinged_at is not None:
                    raise ConnectionError(f"no PONG within {PONG_TIMEOUT_SECONDS:.0f} s")
                if not self.waiters and not self.confirming:
                    return
                await connection.send_command("PING", check_health=False)
                pinged_at = loop.time()
                continue
            pinged_at = None  # whatever came, the connection is alive
            if not isinstance(reply, list) or len(reply) < 2:
                continue  # PONG outside of subscribed mode
            kind, key = reply[0], reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
            if kind == b"message":
                self._wake(key)
            elif kind == b"subscribe":
                self._confirmed(key)

    def _confirmed(self, key: str) -> None:
        confirmation = self.confirming.pop(key, None)
        if key not in self.waiters:  # its last waiter left before Redis confirmed it
            self._background(self._send("UNSUBSCRIBE", key))
        else:
            self.confirmed.add(key)
            self._wake(key)  # subscribed again after a loss: what was published meanwhile is read now
        if confirmation is not None and not confirmation.done():
            confirmation.set_result(key in self.confirmed)

    def _wake(self, key: str) -> None:
        for subscription in self.waiters.get(key, ()):
            subscription.event.set()

    def _drop(self) -> Any:
        """Forget the connection (returned, to be closed): every waiter is woken to re-read,
        and polls until subscribed again."""
        connection, self.connection = self.connection, None
        self.confirmed.clear()
        confirming, self.confirming = self.confirming, {}
        for confirmation in confirming.values():
            if not confirmation.done():
                confirmation.set_result(False)
        for key in self.waiters:
            self._wake(key)
        return connection

    def _background(self, coroutine: Any) -> None:
        """Run `coroutine` on its own, kept referenced until it is done."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self.background.add(task)
        task.add_done_callback(self.background.discard)


async def _disconnect(connection: Any) -> None:
    if connection is None:
        return
    try:
        await connection.disconnect()
    except Exception as exc:
        logger.debug("closing a wake-up connection: %s", exc)


_hub_numbers = itertools.count(1)
# One hub per event loop and Redis URL (tests change REDIS_URL; each test loop has its own).
_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, RedisHub]] = weakref.WeakKeyDictionary()


def hub_for(url: str) -> RedisHub:
    hubs = _hubs.setdefault(asyncio.get_running_loop(), {})
    hub = hubs.get(url)
    if hub is None:
        hub = hubs[url] = RedisHub(url)
    return hub


class RedisSubscription(_Waiter):
    """A waiter's place in its loop's hub: woken by its channel's messages; polls while the
    hub has no confirmed subscription for it."""

    def __init__(self, hub: RedisHub, key: str) -> None:
        self.hub = hub
        self.key = key
        self.event = asyncio.Event()

    @property
    def repoll_after(self) -> float | None:
        return None if self.hub.live(self.key) else REPOLL_SECONDS

    async def close(self) -> None:
        await self.hub.remove(self)


async def subscribe(request_id: uuid.UUID | str) -> LocalSubscription | RedisSubscription:
    """Subscribe before reading the row, so a wake-up between the read and the wait is kept."""
    key = channel_for(request_id)
    if settings.REDIS_URL:
        subscription = RedisSubscription(hub_for(settings.REDIS_URL), key)
        await subscription.hub.add(subscription)
        subscription.event.clear()
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
