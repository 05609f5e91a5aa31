"""Coalescible wake hints (L-CLAIM-3, -4).

The ledger is the authority; a hint only shortens the wait before a pool's next claim. Publishing
is pluggable so ``app`` never imports the broker: ``actors`` installs the real publisher at start-up.
Coalescing: a per-queue flag in Redis (SET NX with a TTL) is set when a hint is sent and cleared by
the consumer *before* it claims, so a burst of enqueues costs one message per claim cycle and no
wake-up is lost (a job committed while the flag is set is seen by the claim that follows).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable

from sqlalchemy import Connection

from app.db import after_commit, tx
from app.observability import metrics
from app.settings import get_settings

log = logging.getLogger(__name__)

# A publisher may return False when it coalesced the hint (one was already outstanding).
Publisher = Callable[[str], bool | None]
_publisher: Publisher | None = None
_last_error_log = 0.0
_suspended_until = 0.0
# After a failed publish, skip publishing for a moment so a Redis outage never slows callers.
BREAKER_SECONDS = 5.0


def set_publisher(publisher: Publisher | None) -> None:
    global _publisher
    _publisher = publisher


def publish_now(queue: str) -> bool:
    """Send one hint for ``queue``; never raises (a failed publish only costs latency)."""
    global _last_error_log, _suspended_until
    if _publisher is None:
        return False
    if time.monotonic() < _suspended_until:
        metrics.hint_published(queue, "suppressed")
        return False
    try:
        sent = _publisher(queue)
        metrics.hint_published(queue, "coalesced" if sent is False else "sent")
        return True
    except Exception as exc:  # Redis down: the 2 s poll covers it
        metrics.hint_published(queue, "failed")
        now = time.monotonic()
        _suspended_until = now + BREAKER_SECONDS
        if now - _last_error_log > 30:
            _last_error_log = now
            log.warning("wake hint for %s not published (%s); pools will poll", queue, exc)
        return False


def worth_a_hint(delay_ms: float) -> bool:
    """Whether a job due ``delay_ms`` after its transaction's start needs a wake hint: one due within two
    short polls does; one due later does not. Every idle pool passes at least once per short poll
    (``LEDGERFLOW_POLL_SECONDS``), and each pass learns when the queue's next pending job falls due and
    sleeps until then (``next_due_in``), so such a job starts on time without a hint: a hint only shortens
    the wait before a pool's next pass (L-CLAIM-3), and it cannot make a job due before its ``run_at``.
    The engine's watch (a deadline minutes or hours away, armed at every start) sent one Dramatiq message
    and cost one claim pass per workflow for nothing before. Two polls, not one: the job commits after its
    transaction's ``now()``, and a pass takes time."""
    return delay_ms < 2_000 * get_settings().poll_seconds


def publish_after_commit(conn: Connection, queues: Iterable[str]) -> None:
    """Register one hint per queue, sent once ``conn``'s transaction commits (none on rollback)."""
    hinted = tx(conn).hinted_queues
    for queue in queues:
        if queue not in hinted:
            hinted.add(queue)
            after_commit(conn, functools.partial(publish_now, queue))
