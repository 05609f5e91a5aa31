"""Long-poll task claims that hold no request thread and cannot starve the API (X-TASK claim's wait_seconds).

Serving model (docs/operations.md "Serving model"): the ``web`` process runs gunicorn's ``gevent``
worker class, so a claim waiting for work is a parked greenlet, not an OS thread; psycopg and redis
cooperate with gevent once gunicorn has monkey-patched the worker. Under a threaded server (the
tests' werkzeug, ``ledgerflow dev``) the same code waits on a ``threading.Event``.

- **Wake-ups**: the database NOTIFYs ``lf_task_ready`` (payload ``namespace_id:queue``) when a task
  becomes PENDING (a trigger, sent at commit). The process's LISTEN connection (``web.listener``) sets
  the events of the claims waiting on that queue, which then try to claim at once.
  A waiting claim also looks again every ``LEDGERFLOW_CLAIM_POLL_SECONDS`` (default 5 s) without a
  notification: a task whose lease expired is claimable again without a state change, and a lost
  listener connection must cost latency only. Behind a pooler in transaction mode the listener needs a
  direct URL (``web.listener.listen_url``).
- **Shutdown**: on SIGTERM (gunicorn's graceful stop, ``web/gunicorn_conf.py``) ``shut_down()`` ends
  every waiting claim at once: it answers what it has, usually ``{"tasks": []}``, which a task worker
  treats as "poll again" (the next claim reaches a process that is not stopping).
- **Cap**: at most ``LEDGERFLOW_LONG_POLLS_PER_CREDENTIAL`` (default 8) long polls (``wait_seconds``
  > 0) of one credential wait at the same time, counted in Redis across processes (per process when
  Redis is not configured); one more answers ``429 RATE_LIMITED`` with ``Retry-After``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from app.auth import Principal
from app.errors import RateLimited
from app.settings import LONG_POLLS_PER_CREDENTIAL, get_settings
from web.listener import listener
from web.ratelimit import redis_client

log = logging.getLogger(__name__)
_COUNTER_TTL_SECONDS = 120  # a crashed process's slots are given back after this long


def per_credential_cap() -> int:
    return LONG_POLLS_PER_CREDENTIAL.get()


_shutting_down = threading.Event()


def shut_down() -> None:
    """The process is stopping: every waiting long-poll claim answers now, and new ones do not wait."""
    _shutting_down.set()
    listener.wake_all()


def shutting_down() -> bool:
    return _shutting_down.is_set()


_local_counts: dict[str, int] = {}
_local_lock = threading.Lock()


@contextlib.contextmanager
def _slot(principal: Principal) -> Iterator[None]:
    cap = per_credential_cap()
    key = f"{get_settings().redis_namespace}:longpoll:{principal.credential_id}"
    client = redis_client()
    if client is not None:
        try:
            pipe = client.pipeline()
            pipe.incr(key)
            pipe.expire(key, _COUNTER_TTL_SECONDS)
            count = int(pipe.execute()[0])
        except Exception as exc:  # Redis may fail; the cap is then per process
            log.warning("long-poll counter unavailable: %s", type(exc).__name__)
            client = None
    if client is None:
        with _local_lock:
            count = _local_counts[key] = _local_counts.get(key, 0) + 1
    try:
        if count > cap:
            raise RateLimited(
                f"at most {cap} long-poll claims of one credential may wait at the same time", retry_after=1
            )
        yield
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.decr(key)
        else:
            with _local_lock:
                _local_counts[key] -= 1


@contextlib.contextmanager
def waiting_claim(
    principal: Principal, queues: list[str], fallback_seconds: float
) -> Iterator[Callable[[float], None]]:
    """For one long-poll claim: a slot under the credential's cap and a ``wait(seconds)`` that returns
    when a task may be ready on one of ``queues`` (a NOTIFY), or after ``fallback_seconds`` at most."""
    keys = [f"{principal.namespace_id}:{q}" for q in queues]
    with _slot(principal), listener.listen(keys) as event:

        def wait(seconds: float) -> None:
            if not _shutting_down.is_set():
                event.wait(max(0.0, min(seconds, fallback_seconds)))
            event.clear()

        yield wait
