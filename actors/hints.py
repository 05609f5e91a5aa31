"""Wake-hint actors, one per ledger queue, and the coalescing publisher the ledger calls."""

from __future__ import annotations

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


def _on_hint(queue: str) -> None:
    metrics.hint_wakeup(queue)
    # Clear the coalescing flag *before* the claim, so a later enqueue publishes a fresh hint.
    try:
        _redis().delete(_flag(queue))
    finally:
        nudge = LOCAL_NUDGERS.get(queue)
        if nudge is not None:
            nudge()


@dramatiq.actor(queue_name=QUEUE_OF_POOL[Pool.ADVANCE], max_retries=0, max_age=60_000, time_limit=10_000)
def wake_advance(queue: str) -> None:
    _on_hint(queue)


@dramatiq.actor(queue_name=QUEUE_OF_POOL[Pool.OUTBOUND], max_retries=0, max_age=60_000, time_limit=10_000)
def wake_outbound(queue: str) -> None:
    _on_hint(queue)


_ACTOR_OF_QUEUE = {QUEUE_OF_POOL[Pool.ADVANCE]: wake_advance, QUEUE_OF_POOL[Pool.OUTBOUND]: wake_outbound}


def register_local_pool(queue: str, nudge: Callable[[], None]) -> None:
    """Route ``queue``'s hints to a pool of this process: the hint actor nudges it after clearing the
    coalescing flag, and (with the doorbell broker) the idle consumer nudges it as soon as the
    doorbell rings, before the message is fetched."""
    LOCAL_NUDGERS[queue] = nudge
    if isinstance(broker, HintBroker):
        broker.doorbell_listeners[queue] = nudge


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
