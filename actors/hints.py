"""Wake-hint actors, one per ledger queue, and the coalescing publisher the ledger calls."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import cast

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from redis import Redis

from actors.broker import HintBroker, broker, has_redis
from app.ledger import hints
from app.ledger.states import QUEUE_OF_POOL, Pool
from app.observability import metrics
from app.settings import get_settings

# Pools running in this process, by queue; a hint nudges the local pool.
LOCAL_NUDGERS: dict[str, Callable[[], None]] = {}


def _flag(queue: str) -> str:
    return f"{get_settings().redis_namespace}:hint:{queue}"


def _redis() -> Redis:
    """The broker's Redis client: hints are sent and heard only when there is Redis (``has_redis``)."""
    return cast(RedisBroker, broker).client


def _clear_then_nudge(queue: str, *, always: bool) -> None:
    """Clear the queue's coalescing flag, then nudge the local pool: its pass starts after every publish
    that found the flag set, so a job committed meanwhile is claimed now. Whoever clears the flag nudges
    after it; with ``always`` False (the hint's message) the nudge is skipped when the flag was already
    gone: the doorbell that rang for this very hint cleared it and nudged the pool after (or it expired,
    after ``hint_flag_ttl_ms``, longer than the poll that then covers it). One pass per hint, not two.
    A failed clear still nudges."""
    cleared = True
    try:
        cleared = bool(_redis().delete(_flag(queue)))
    finally:
        nudge = LOCAL_NUDGERS.get(queue)
        if nudge is not None and (always or cleared):
            nudge()


def _on_hint(queue: str) -> None:
    metrics.hint_wakeup(queue)
    _clear_then_nudge(queue, always=False)


def _rang(queue: str) -> None:
    """The queue's doorbell rang in an idle consumer of this process: the pool claims now, without waiting
    for Dramatiq to fetch the message and run its actor (~1 ms)."""
    _clear_then_nudge(queue, always=True)


@dramatiq.actor(queue_name=QUEUE_OF_POOL[Pool.ADVANCE], max_retries=0, max_age=60_000, time_limit=10_000)
def wake_advance(queue: str) -> None:
    _on_hint(queue)


@dramatiq.actor(queue_name=QUEUE_OF_POOL[Pool.OUTBOUND], max_retries=0, max_age=60_000, time_limit=10_000)
def wake_outbound(queue: str) -> None:
    _on_hint(queue)


_ACTOR_OF_QUEUE = {QUEUE_OF_POOL[Pool.ADVANCE]: wake_advance, QUEUE_OF_POOL[Pool.OUTBOUND]: wake_outbound}


def register_local_pool(queue: str, nudge: Callable[[], None]) -> None:
    """Route ``queue``'s hints to a pool of this process: the hint actor nudges it after clearing the
    coalescing flag, and (with the doorbell broker) the idle consumer clears it and nudges as soon as
    the doorbell rings, before the message is fetched; the message's actor then finds the flag gone and
    leaves the pool alone."""
    LOCAL_NUDGERS[queue] = nudge
    if isinstance(broker, HintBroker):
        broker.doorbell_listeners[queue] = functools.partial(_rang, queue)


def publish(queue: str) -> bool:
    """Send a hint unless one is already outstanding for ``queue`` (coalescing): the flag check and
    the enqueue of the Dramatiq message are one Redis round trip (actors/broker.py). Returns whether
    a message was sent (False: coalesced)."""
    settings = get_settings()
    actor = _ACTOR_OF_QUEUE[queue]
    if isinstance(broker, HintBroker):
        return broker.enqueue_unless_flagged(actor.message(queue), _flag(queue), settings.hint_flag_ttl_ms)
    if _redis().set(_flag(queue), "1", nx=True, px=settings.hint_flag_ttl_ms):
        actor.send(queue)
        return True
    return False


def install_publisher() -> None:
    """Make the ledger publish hints through Redis (no-op without REDIS_URL)."""
    hints.set_publisher(publish if has_redis() else None)
