"""The cache backend with REDIS_URL set: Django's Redis cache, read as a miss while Redis is down.

Nothing the product caches is the truth (the database is): a copy of the audit
verification checkpoint, a lock that keeps two chain verifications from overlapping. So
an unreachable Redis must cost a slower path, never an error: a read is a miss, a write
or a delete is skipped (and `add` reports that it added nothing, so a lock is not
taken), each logged.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from aimon_admin.core import metrics

logger = logging.getLogger(__name__)

UNREACHABLE = (RedisConnectionError, RedisTimeoutError)


def _skipped(operation: str, exc: Exception) -> None:
    logger.warning("cache unavailable, %s skipped: %s", operation, exc)
    metrics.REDIS_ERRORS.labels("cache").inc()


class ResilientRedisCache(RedisCache):
    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        try:
            return super().get(key, default, version)
        except UNREACHABLE as exc:
            _skipped("get", exc)
            return default

    def get_many(self, keys: Any, version: int | None = None) -> dict[str, Any]:
        try:
            return super().get_many(keys, version)
        except UNREACHABLE as exc:
            _skipped("get_many", exc)
            return {}

    def has_key(self, key: Any, version: int | None = None) -> bool:
        try:
            return super().has_key(key, version)
        except UNREACHABLE as exc:
            _skipped("has_key", exc)
            return False

    def set(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> None:
        try:
            super().set(key, value, timeout, version)
        except UNREACHABLE as exc:
            _skipped("set", exc)

    def set_many(
        self, data: dict[str, Any], timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> list[str]:
        try:
            return super().set_many(data, timeout, version)
        except UNREACHABLE as exc:
            _skipped("set_many", exc)
            return list(data)

    def add(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        try:
            return super().add(key, value, timeout, version)
        except UNREACHABLE as exc:
            _skipped("add", exc)
            return False

    def touch(self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        try:
            return super().touch(key, timeout, version)
        except UNREACHABLE as exc:
            _skipped("touch", exc)
            return False

    def delete(self, key: Any, version: int | None = None) -> bool:
        try:
            return super().delete(key, version)
        except UNREACHABLE as exc:
            _skipped("delete", exc)
            return False

    def delete_many(self, keys: Any, version: int | None = None) -> None:
        try:
            super().delete_many(keys, version)
        except UNREACHABLE as exc:
            _skipped("delete_many", exc)
