"""Per-credential rate limits: every authenticated request counts against its credential's
limits in Redis (the ``limits`` library, moving window), shared by every ``web`` process; past a
limit the API answers ``429 RATE_LIMITED`` with ``Retry-After``. Stripe and GitHub do the same.

``LEDGERFLOW_RATE_LIMIT`` sets the limits (``limits`` notation, ``;``-separated, default ``1000/second``;
``off`` disables them). Each limit costs one Redis round trip per request, so the default is one limit:
high enough that the engine's own clients and task workers at full speed never meet it (a workflow step
is two or three requests of the task worker's credential; ``make bench`` runs with 0 responses of 429),
low enough that one credential cannot take a web process for itself. Without ``REDIS_URL`` the windows
live in each process's memory. A Redis outage never refuses a request: the limiter fails open and logs."""

from __future__ import annotations

import logging
import math
import threading
import time
from functools import lru_cache

import redis
from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage, RedisStorage, Storage
from limits.strategies import MovingWindowRateLimiter

from app.auth import Principal
from app.errors import RateLimited
from app.settings import RATE_LIMIT, get_settings

log = logging.getLogger(__name__)
_last_warning = 0.0


def _storage_uri(url: str) -> str:
    return "redis+unix://" + url[len("unix://") :] if url.startswith("unix://") else url


# How often the in-process windows drop their expired entries (see _ProcessStorage).
MEMORY_EXPIRY_SECONDS = 1.0


class _ProcessStorage(MemoryStorage):
    """``limits``' in-process storage, without its expiry thread per request: MemoryStorage drops
    expired entries on a ``threading.Timer`` of 10 ms that it starts again at the next hit once the
    last one ended, i.e. a new thread for almost every request (~0.3 ms of CPU each). Here the
    same clean-up runs inline at most once per MEMORY_EXPIRY_SECONDS; the windows themselves are
    unchanged (a moving window counts only unexpired entries whether or not they were dropped yet).
    Overrides the private method of limits 5.8 (pinned); tests/unit/test_ratelimit_storage.py fails
    if a new version renames it."""

    def __init__(self) -> None:
        super().__init__()
        self.timer.cancel()  # the one the constructor started
        self._next_expiry = time.monotonic() + MEMORY_EXPIRY_SECONDS
        self._expiry_lock = threading.Lock()

    def _MemoryStorage__schedule_expiry(self) -> None:  # the name-mangled private method
        now = time.monotonic()
        if now < self._next_expiry or not self._expiry_lock.acquire(blocking=False):
            return
        try:
            self._next_expiry = now + MEMORY_EXPIRY_SECONDS
            self._MemoryStorage__expire_events()  # type: ignore[attr-defined]  # limits' private method
        finally:
            self._expiry_lock.release()


@lru_cache(maxsize=4)
def _limiter(redis_url: str | None) -> MovingWindowRateLimiter:
    storage: Storage = _ProcessStorage() if not redis_url else RedisStorage(_storage_uri(redis_url))
    return MovingWindowRateLimiter(storage)


@lru_cache(maxsize=4)
def _limits(raw: str) -> tuple[RateLimitItem, ...]:
    return tuple(parse_many(raw))


@lru_cache(maxsize=4)
def _client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url, socket_connect_timeout=1, socket_timeout=1)


def redis_client() -> redis.Redis | None:
    """The web process's Redis client (None when Redis is not configured)."""
    url = get_settings().redis_url
    return _client(url) if url else None


def check(principal: Principal) -> None:
    """Count one request of ``principal``; raise ``RateLimited`` when a limit is exhausted."""
    global _last_warning
    raw = RATE_LIMIT.get()
    if raw is None:  # off
        return
    settings = get_settings()
    limiter = _limiter(settings.redis_url)
    who = (settings.redis_namespace, principal.credential_id)
    try:
        for item in _limits(raw):
            if not limiter.hit(item, *who):
                reset = limiter.get_window_stats(item, *who).reset_time
                retry_after = max(1, math.ceil(reset - time.time()))
                raise RateLimited(
                    f"rate limit of this credential exceeded ({item}); retry after {retry_after} s",
                    retry_after=retry_after,
                )
    except RateLimited:
        raise
    except Exception as exc:  # fail open: Redis may be down, the API must not be
        if time.monotonic() - _last_warning > 30:
            _last_warning = time.monotonic()
            log.warning("rate limiter unavailable (%s): requests are not limited", type(exc).__name__)
