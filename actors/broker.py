"""The Dramatiq broker. With REDIS_URL unset there is no broker: pools simply poll.

Wake hints must arrive in about a millisecond without busy polling. Dramatiq's stock Redis consumer
polls an empty queue with a backoff up to ``worker_timeout`` (default 1 s: ~270 ms hint latency; a
10 ms timeout costs ~100 Redis script calls per second per idle process). ``HintBroker`` keeps
Dramatiq as the carrier of every message and only changes *how an idle consumer waits*: each enqueue
also pushes a token on a per-queue "doorbell" list in the same Redis round trip, and an idle consumer
blocks on that list with BLPOP (up to ``worker_timeout``) instead of sleeping. A token left behind
(e.g. while the consumer was busy) only causes one extra, empty fetch; a lost token only costs the
usual wait until the next fetch, never a message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from uuid import uuid4

import dramatiq
import redis
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.brokers.stub import StubBroker
from dramatiq.common import current_millis
from dramatiq.errors import ConnectionClosed
from dramatiq.message import Message
from dramatiq.middleware import AgeLimit, Callbacks, Retries, ShutdownNotifications, TimeLimit

from app.settings import get_settings

# Tokens kept per doorbell: enough to wake every blocked consumer of a burst, bounded when none listens.
DOORBELL_MAX = 64
# An idle consumer whose prefetch window is full (all worker threads busy) re-checks this often.
BUSY_RECHECK_SECONDS = 0.005
# Stay well under the client's socket_timeout (5 s) so a quiet BLPOP never looks like a dead socket.
MAX_BLOCK_SECONDS = 4.0


def doorbell_key(namespace: str, queue_name: str) -> str:
    return f"{namespace}:{queue_name}.doorbell"


# A coalesced hint in ONE round trip: set the queue's "hint outstanding" flag unless it is set and,
# only then, enqueue the Dramatiq message exactly as Dramatiq's own enqueue does (store it in the
# queue's message hash, push its id on the queue) and ring the doorbell.
# KEYS: flag, queue messages hash, queue list, doorbell; ARGV: flag ttl ms, message id, data, bell max
_HINT_SCRIPT = """
if not redis.call("set", KEYS[1], "1", "NX", "PX", ARGV[1]) then
    return 0
end
redis.call("hset", KEYS[2], ARGV[2], ARGV[3])
redis.call("rpush", KEYS[3], ARGV[2])
redis.call("rpush", KEYS[4], 1)
redis.call("ltrim", KEYS[4], -tonumber(ARGV[4]), -1)
return 1
"""


class HintBroker(RedisBroker):
    """RedisBroker whose enqueue rings the queue's doorbell and whose idle consumers block on it."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._hint_script = self.client.register_script(_HINT_SCRIPT)
        # Called with no argument by a consumer of that Dramatiq queue when its doorbell rings, before
        # it fetches the message (see _DoorbellConsumer): the early wake-up of a local pool, which
        # clears the queue's coalescing flag first (actors/hints.py).
        self.doorbell_listeners: dict[str, Callable[[], None]] = {}

    @property
    def consumer_class(self):
        return _DoorbellConsumer

    def enqueue_unless_flagged(self, message: Message, flag: str, flag_ttl_ms: int) -> bool:
        """Enqueue ``message`` (no delay) only if ``flag`` was not set, setting it; one round trip.
        Returns whether the message was enqueued. Middleware sees the enqueue as usual."""
        message = message.copy(options={"redis_message_id": str(uuid4())})
        self.emit_before("enqueue", message, None)
        queue = f"{self.namespace}:{message.queue_name}"
        sent = self._hint_script(
            keys=[flag, f"{queue}.msgs", queue, doorbell_key(self.namespace, message.queue_name)],
            args=[flag_ttl_ms, message.options["redis_message_id"], message.encode(), DOORBELL_MAX],
        )
        if sent:
            self.emit_after("enqueue", message, None)
        return bool(sent)

    def do_enqueue(self, queue_name: str, message_id: str, data: bytes) -> None:
        # The same call Dramatiq makes (its dispatch script), plus RPUSH/LTRIM of the doorbell, in
        # one pipelined round trip. The message is stored before the token, so a consumer woken by
        # the token always finds it (or a faster consumer already took it).
        args = [
            "enqueue",
            current_millis(),
            queue_name,
            self.broker_id,
            self.heartbeat_timeout,
            self.dead_message_ttl,
            self._should_do_maintenance("enqueue"),
            self._max_unpack_size(),
            message_id,
            data,
        ]
        bell = doorbell_key(self.namespace, queue_name)
        pipe = self.client.pipeline(transaction=False)
        self.scripts["dispatch"](keys=[self.namespace], args=args, client=pipe)
        pipe.rpush(bell, 1)
        pipe.ltrim(bell, -DOORBELL_MAX, -1)
        pipe.execute()


class _DoorbellConsumer(_RedisConsumer):
    def __next__(self):  # Dramatiq's consumer protocol: a message proxy or None
        message = self._cached()
        if message is not None:
            return message
        try:
            if self.outstanding_message_count < self.prefetch:
                self.message_cache = self.broker.do_fetch(
                    self.queue_name, self.prefetch - self.outstanding_message_count
                )
                if self.message_cache:
                    return self._cached()
                # Nothing queued: block until an enqueue rings (or the idle timeout passes).
                # Returning None afterwards lets the consumer thread check for shutdown.
                rang = self.broker.client.blpop(
                    [doorbell_key(self.broker.namespace, self.queue_name)],
                    timeout=min(self.timeout / 1000, MAX_BLOCK_SECONDS),
                )
                listener = self.broker.doorbell_listeners.get(self.queue_name) if rang else None
                if listener is not None:
                    # Early wake-up: the listener (actors/hints.py) clears the coalescing flag and the
                    # local pool claims now, without waiting for the message's fetch and dispatch to a
                    # worker thread (~1 ms). The message still follows; its actor nudges again only if
                    # the flag was set anew since (it clears it first), so nothing is lost.
                    listener()
            else:
                time.sleep(BUSY_RECHECK_SECONDS)
            return None
        except redis.ConnectionError as e:
            raise ConnectionClosed(e) from None

    def _cached(self):
        while self.message_cache:
            data = self.message_cache.pop(0)
            if data is None:
                continue
            message = Message.decode(data)
            self.queued_message_ids.add(message.message_id)
            self.misses = 0
            return MessageProxy(message)
        return None


def build_broker() -> dramatiq.Broker:
    settings = get_settings()
    middleware = [AgeLimit(), TimeLimit(), ShutdownNotifications(), Callbacks(), Retries(max_retries=0)]
    if not settings.redis_url:
        return StubBroker(middleware=middleware)
    return HintBroker(
        url=settings.redis_url,
        namespace=settings.redis_namespace,
        middleware=middleware,
        socket_connect_timeout=1,
        socket_timeout=5,
        health_check_interval=10,
    )


broker = build_broker()
dramatiq.set_broker(broker)


def has_redis() -> bool:
    return isinstance(broker, RedisBroker)
