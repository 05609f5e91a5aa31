"""Wake-hint coalescing (L-CLAIM-3): a burst of publishes costs a bounded number of messages, the
consumer clears the flag before it nudges the pool, and a failing publisher never raises."""

from __future__ import annotations

import threading
import time

import fakeredis
import pytest

from actors import hints as hint_actors
from app.ledger import hints
from app.ledger.states import QUEUE_OF_POOL, Pool
from app.settings import get_settings

ADVANCE = QUEUE_OF_POOL[Pool.ADVANCE]
OUTBOUND = QUEUE_OF_POOL[Pool.OUTBOUND]


class FakeActor:
    def __init__(self):
        self.sent: list[str] = []

    def send(self, queue):
        self.sent.append(queue)


class FakeBroker:
    def __init__(self, client):
        self.client = client


@pytest.fixture
def fake(monkeypatch):
    client = fakeredis.FakeRedis()
    actors = {ADVANCE: FakeActor(), OUTBOUND: FakeActor()}
    monkeypatch.setattr(hint_actors, "broker", FakeBroker(client))
    monkeypatch.setattr(hint_actors, "_ACTOR_OF_QUEUE", actors)
    monkeypatch.setattr(hint_actors, "LOCAL_NUDGERS", {})
    return client, actors


def test_a_burst_of_publishes_sends_one_message_per_claim_cycle(fake):
    client, actors = fake
    for _ in range(100):
        hint_actors.publish(ADVANCE)
    assert actors[ADVANCE].sent == [ADVANCE]
    # queues coalesce independently
    for _ in range(50):
        hint_actors.publish(OUTBOUND)
    assert actors[OUTBOUND].sent == [OUTBOUND]
    # the consumer takes the hint: the next burst sends one more
    hint_actors._on_hint(ADVANCE)
    for _ in range(100):
        hint_actors.publish(ADVANCE)
    assert actors[ADVANCE].sent == [ADVANCE, ADVANCE]


def test_the_flag_expires_so_a_lost_hint_is_not_forever(fake):
    client, actors = fake
    hint_actors.publish(ADVANCE)
    ttl_ms = client.pttl(hint_actors._flag(ADVANCE))
    assert 0 < ttl_ms <= get_settings().hint_flag_ttl_ms
    client.delete(hint_actors._flag(ADVANCE))  # as if it expired
    hint_actors.publish(ADVANCE)
    assert actors[ADVANCE].sent == [ADVANCE, ADVANCE]


def test_the_consumer_clears_the_flag_before_nudging(fake):
    client, actors = fake
    flag_seen_by_nudge: list[int] = []
    hint_actors.LOCAL_NUDGERS[ADVANCE] = lambda: flag_seen_by_nudge.append(
        client.exists(hint_actors._flag(ADVANCE))
    )
    hint_actors.publish(ADVANCE)
    assert client.exists(hint_actors._flag(ADVANCE)) == 1
    hint_actors._on_hint(ADVANCE)
    assert flag_seen_by_nudge == [0]
    # an enqueue committed while the pool claims publishes a fresh hint (no lost wake-up)
    hint_actors.publish(ADVANCE)
    assert actors[ADVANCE].sent == [ADVANCE, ADVANCE]


def test_one_pass_per_hint_the_doorbell_clears_and_nudges_then_its_message_leaves_the_pool_alone(fake):
    """Whoever clears the flag nudges after it: the doorbell (always), the message's actor only when it
    was the one to clear it. A hint whose doorbell rang first costs the pool one pass, not two (the
    actor nudged again: 2 passes per hint, 2.9 claim statements per task-task workflow in the bench)."""
    client, actors = fake
    flag = hint_actors._flag(ADVANCE)
    seen: list[int] = []  # the flag as each nudge saw it
    hint_actors.LOCAL_NUDGERS[ADVANCE] = lambda: seen.append(client.exists(flag))
    hint_actors.publish(ADVANCE)
    hint_actors._rang(ADVANCE)  # its doorbell, in the idle consumer
    assert seen == [0]  # cleared, then nudged
    hint_actors._on_hint(ADVANCE)  # its message: the flag is gone, the pool looked after the clear
    assert seen == [0]
    hint_actors.publish(ADVANCE)  # a job committed after that clear publishes a fresh hint
    assert actors[ADVANCE].sent == [ADVANCE, ADVANCE]
    hint_actors._on_hint(ADVANCE)  # its message came first (the consumer was busy): it clears and nudges
    assert seen == [0, 0]
    hint_actors._rang(ADVANCE)  # a ring always nudges
    assert seen == [0, 0, 0]


def test_the_pool_is_nudged_even_when_redis_fails_on_delete(fake, monkeypatch):
    client, _ = fake
    nudged = []
    hint_actors.LOCAL_NUDGERS[ADVANCE] = lambda: nudged.append(True)

    def boom(*a, **kw):
        raise ConnectionError("redis gone")

    monkeypatch.setattr(client, "delete", boom)
    with pytest.raises(ConnectionError):
        hint_actors._on_hint(ADVANCE)
    assert nudged == [True]


def test_real_redis_burst_enqueues_one_dramatiq_message(redis_client):
    """The same with the real broker and Redis: 100 publishes leave one message on the queue."""
    from actors.broker import broker, has_redis

    if not has_redis():
        pytest.skip("no Redis broker configured")
    ns = get_settings().redis_namespace
    queue_key = f"{ns}:{ADVANCE}"
    redis_client.delete(queue_key, hint_actors._flag(ADVANCE))
    for _ in range(100):
        hint_actors.publish(ADVANCE)
    assert redis_client.llen(queue_key) == 1
    hint_actors._on_hint(ADVANCE)  # consumer side: flag cleared
    assert not redis_client.exists(hint_actors._flag(ADVANCE))
    for _ in range(100):
        hint_actors.publish(ADVANCE)
    assert redis_client.llen(queue_key) == 2
    broker.flush(ADVANCE)


def test_a_failing_publisher_never_raises_and_backs_off(monkeypatch):
    calls = []

    def down(queue):
        calls.append(queue)
        raise ConnectionError("redis down")

    monkeypatch.setattr(hints, "_suspended_until", 0.0)
    monkeypatch.setattr(hints, "BREAKER_SECONDS", 0.2)
    hints.set_publisher(down)
    try:
        assert hints.publish_now(ADVANCE) is False
        # while the breaker is open, callers pay nothing (no Redis round trip)
        for _ in range(50):
            assert hints.publish_now(ADVANCE) is False
        assert calls == [ADVANCE]
        time.sleep(0.25)
        sent = []
        hints.set_publisher(sent.append)
        assert hints.publish_now(ADVANCE) is True and sent == [ADVANCE]
    finally:
        hints.set_publisher(None)
        hints._suspended_until = 0.0


def test_a_ringing_doorbell_wakes_the_local_pool_before_the_message_is_fetched(redis_client, monkeypatch):
    """The early wake-up: an idle consumer blocked on the doorbell clears the flag and nudges the
    registered pool as soon as a hint is published, then returns to Dramatiq, which fetches and runs the
    message (its actor finds the flag cleared and does not nudge again). Without a listener the consumer
    behaves as before."""
    from actors.broker import HintBroker, broker

    if not isinstance(broker, HintBroker):
        pytest.skip("no Redis broker configured")
    monkeypatch.setattr(hint_actors, "LOCAL_NUDGERS", {})
    monkeypatch.setattr(broker, "doorbell_listeners", {})
    broker.flush(ADVANCE)
    redis_client.delete(hint_actors._flag(ADVANCE), f"{get_settings().redis_namespace}:{ADVANCE}.doorbell")
    early: list[int] = []  # the queue length seen by the early nudge: the message is not fetched yet
    queue_key = f"{get_settings().redis_namespace}:{ADVANCE}"
    hint_actors.register_local_pool(ADVANCE, lambda: early.append(redis_client.llen(queue_key)))
    consumer = broker.consume(ADVANCE, prefetch=1, timeout=2000)
    try:
        assert next(consumer) is None  # nothing queued: it blocked on the doorbell and timed out
        assert early == []  # a timeout is not a ring
        returned: list[object] = []
        blocked = threading.Thread(target=lambda: returned.append(next(consumer)))
        blocked.start()
        time.sleep(0.3)  # the consumer found nothing and blocks on the doorbell
        hint_actors.publish(ADVANCE)
        blocked.join(5)
        assert returned == [None]  # woken by the bell: the pool was nudged, the message waits
        assert early == [1]
        assert not redis_client.exists(hint_actors._flag(ADVANCE))  # the ring cleared the flag
        message = next(consumer)  # Dramatiq fetches it on the next call, as before
        assert message is not None and message.actor_name == "wake_advance"
        hint_actors._on_hint(ADVANCE)  # its actor: the pool looked after the clear, no second pass
        assert early == [1]
        consumer.ack(message)
    finally:
        consumer.close()
        broker.flush(ADVANCE)
