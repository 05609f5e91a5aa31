"""Long-poll task claims that hold no request thread and cannot starve the API (X-TASK claim's wait_seconds).

Serving model (docs/operations.md "Serving model"): the ``web`` process runs gunicorn's ``gevent``
worker class, so a claim waiting for work is a parked greenlet, not an OS thread; psycopg and redis
cooperate with gevent once gunicorn has monkey-patched the worker. Under a threaded server (the
tests' werkzeug, ``ledgerflow dev``) the same code waits on a ``threading.Event``.

- **Wake-ups**: the database NOTIFYs ``lf_task_ready`` (payload ``namespace_id:queue``) when a task
  becomes PENDING (a trigger, sent at commit). One listener per process (a dedicated connection,
  ``LISTEN``) sets the events of the claims waiting on that queue, which then try to claim at once.
  A waiting claim also looks again every ``LEDGERFLOW_CLAIM_POLL_SECONDS`` (default 5 s) without a
  notification: a task whose lease expired is claimable again without a state change, and a lost
  listener connection must cost latency only. Behind a pooler in transaction mode the listener needs a
  direct URL (``listen_url``).
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
import os
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
from sqlalchemy import make_url

from app.auth import Principal
from app.db import transaction_pooling
from app.errors import RateLimited
from app.settings import LISTEN_DATABASE_URL, LONG_POLLS_PER_CREDENTIAL, get_settings
from web.ratelimit import redis_client

log = logging.getLogger(__name__)
CHANNEL = "lf_task_ready"
_COUNTER_TTL_SECONDS = 120  # a crashed process's slots are given back after this long


def listen_url() -> str | None:
    """The database URL of the LISTEN connection. ``LISTEN`` is a session's: behind a pooler in
    transaction mode (``LEDGERFLOW_DB_TRANSACTION_POOLING``) it must reach PostgreSQL directly, given as
    ``LEDGERFLOW_LISTEN_DATABASE_URL``; without one there is no listener (None) and a waiting claim
    finds new tasks by its timed look alone."""
    direct = LISTEN_DATABASE_URL.get()
    if direct:
        return direct
    return None if transaction_pooling() else get_settings().database_url


def per_credential_cap() -> int:
    return LONG_POLLS_PER_CREDENTIAL.get()


class _Listener:
    """One LISTEN connection per process; waiting claims register an event per ``namespace:queue``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[threading.Event]] = {}
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._off = False

    def _ensure_started(self) -> None:
        with self._lock:
            if (
                self._thread is not None
                and self._pid == os.getpid()
                and (self._thread.is_alive() or self._off)
            ):
                return
            self._off = listen_url() is None
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="lf-task-listener", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        url = listen_url()
        if url is None:
            log.info(
                "no task wake-up listener behind a transaction pooler without LEDGERFLOW_LISTEN_DATABASE_URL: "
                "waiting claims look every LEDGERFLOW_CLAIM_POLL_SECONDS"
            )
            return
        conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        while True:
            try:
                with psycopg.connect(conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    for note in conn.notifies():
                        self._wake(note.payload)
            except Exception as exc:  # the waiting claims fall back to their timed look
                log.warning("task wake-up listener lost its connection: %s", type(exc).__name__)
                time.sleep(1.0)

    def _wake(self, key: str) -> None:
        with self._lock:
            for event in self._waiters.get(key, ()):
                event.set()

    def wake_all(self) -> None:
        with self._lock:
            for events in self._waiters.values():
                for event in events:
                    event.set()

    @contextlib.contextmanager
    def listen(self, keys: list[str]) -> Iterator[threading.Event]:
        self._ensure_started()
        event = threading.Event()
        with self._lock:
            for k in keys:
                self._waiters.setdefault(k, set()).add(event)
        try:
            yield event
        finally:
            with self._lock:
                for k in keys:
                    waiting = self._waiters.get(k)
                    if waiting is not None:
                        waiting.discard(event)
                        if not waiting:
                            del self._waiters[k]


_listener = _Listener()
_shutting_down = threading.Event()


def shut_down() -> None:
    """The process is stopping: every waiting long-poll claim answers now, and new ones do not wait."""
    _shutting_down.set()
    _listener.wake_all()


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
    with _slot(principal), _listener.listen(keys) as event:

        def wait(seconds: float) -> None:
            if not _shutting_down.is_set():
                event.wait(max(0.0, min(seconds, fallback_seconds)))
            event.clear()

        yield wait
