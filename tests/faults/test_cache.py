"""The Redis cache backend across a Redis outage: a miss while down, a cache again after."""

from __future__ import annotations

import pytest
import redis

from aimon_admin.core.cache import ResilientRedisCache
from tests.faults.conftest import PrivateRedis

pytestmark = pytest.mark.postgres  # runs with the PostgreSQL + Redis suite, as the folder does


def test_the_cache_reads_as_a_miss_while_redis_is_down_and_works_again_when_it_returns(
    private_redis: PrivateRedis,
) -> None:
    cache = ResilientRedisCache(
        private_redis.url(3), {"OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}}
    )
    raw = redis.Redis.from_url(private_redis.url(3))
    cache.set("checkpoint", {"seq": 7}, timeout=None)
    assert cache.get("checkpoint") == {"seq": 7}
    assert raw.ttl(cache.make_and_validate_key("checkpoint")) == -1  # "no expiry" passed through
    assert cache.add("lock", "1", timeout=60) is True

    private_redis.stop()
    assert cache.get("checkpoint", "miss") == "miss"
    assert cache.get_many(["checkpoint", "lock"]) == {}
    assert cache.has_key("checkpoint") is False
    assert cache.set("checkpoint", {"seq": 8}) is None
    assert cache.set_many({"a": 1, "b": 2}) == ["a", "b"]
    assert cache.add("lock", "1", timeout=60) is False  # a lock is not taken while down
    assert cache.touch("checkpoint") is False
    assert cache.delete("checkpoint") is False
    assert cache.delete_many(["a", "b"]) is None

    private_redis.start()  # no persistence: it comes back empty
    assert cache.get("checkpoint") is None
    cache.set("checkpoint", {"seq": 9})
    assert cache.get("checkpoint") == {"seq": 9}
    assert cache.add("lock", "1", timeout=60) is True
    raw.close()
