"""The in-process rate-limit windows (no REDIS_URL): limits' MemoryStorage started a timer thread for
almost every request; ours expires entries inline. Needs no Redis and no database."""

from __future__ import annotations

import threading
import time

from limits import parse
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from web import ratelimit


def test_the_private_hook_we_override_still_exists_in_limits():
    # a new limits version that renames it would bring the thread per request back silently
    assert hasattr(MemoryStorage, "_MemoryStorage__schedule_expiry")
    assert hasattr(MemoryStorage, "_MemoryStorage__expire_events")


def test_hits_start_no_thread_and_the_window_still_limits():
    storage = ratelimit._ProcessStorage()
    limiter = MovingWindowRateLimiter(storage)
    item = parse("5/second")
    before = threading.active_count()
    results = []
    for _ in range(6):
        results.append(limiter.hit(item, "ns", "cred"))
        time.sleep(0.012)  # longer than MemoryStorage's 10 ms timer: it would start a thread per hit
    assert results == [True] * 5 + [False]
    assert threading.active_count() <= before  # (the constructor's own timer, cancelled, may still be ending)
    assert limiter.hit(item, "ns", "other-cred")  # windows are per credential


def test_expired_entries_are_dropped_inline(monkeypatch):
    storage = ratelimit._ProcessStorage()
    limiter = MovingWindowRateLimiter(storage)
    item = parse("2/second")
    assert limiter.hit(item, "ns", "gone")
    assert any(storage.events.values())
    monkeypatch.setattr(time, "time", lambda real=time.time: real() + 5)  # the entry is long expired
    storage._next_expiry = 0.0  # the next clean-up is due
    assert limiter.hit(item, "ns", "other")
    assert not any(events for key, events in storage.events.items() if "gone" in key)
