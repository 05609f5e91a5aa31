"""One LISTEN connection per web process, for what the database announces at commit:

- ``lf_task_ready`` (payload ``namespace_id:queue``, a trigger on ``workflow_tasks``): a task became
  PENDING; the long-poll claims waiting on that queue try to claim at once (``web.long_poll``).
- ``lf_credentials`` (no payload, a statement trigger on ``credentials`` and ``namespaces``): a credential
  was revoked or deleted, or a namespace changed; this process's principal cache is emptied
  (``app.auth.principals``). The cache is used only while this connection is listening, for the database
  the app uses (``PrincipalCache.hearing``): a process that cannot hear a revocation reads every token.

The connection is made at the first authenticated request or long-poll claim of a process (after a fork,
again in the child), and made again a second after it is lost. ``LISTEN`` is a session's: behind a pooler
in transaction mode (``LEDGERFLOW_DB_TRANSACTION_POOLING``) it needs a direct URL
(``LEDGERFLOW_LISTEN_DATABASE_URL``); without one there is no listener: waiting claims find new tasks by
their timed look alone and no principal is cached.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator

import psycopg

from app.auth import principals
from app.db import psycopg_conninfo, transaction_pooling
from app.settings import LISTEN_DATABASE_URL, get_settings

log = logging.getLogger(__name__)
TASK_CHANNEL = "lf_task_ready"
CREDENTIALS_CHANNEL = "lf_credentials"


def listen_url() -> str | None:
    """The database URL of the LISTEN connection (None: there is none, see the module's docstring)."""
    direct = LISTEN_DATABASE_URL.get()
    if direct:
        return direct
    return None if transaction_pooling() else get_settings().database_url


class Listener:
    """The process's LISTEN connection; waiting claims register an event per ``namespace:queue``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[threading.Event]] = {}
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._off = False

    def _running(self) -> bool:
        """This process's listening thread runs (or this process has no listener)."""
        thread = self._thread
        return thread is not None and self._pid == os.getpid() and (self._off or thread.is_alive())

    def ensure_started(self) -> None:
        """Start the listening thread of this process unless it runs (or there is no listener)."""
        if self._running():  # every request asks: no lock when it runs
            return
        with self._lock:
            if self._running():
                return
            self._off = listen_url() is None
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="lf-listener", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        url = listen_url()
        if url is None:
            log.info(
                "no LISTEN connection behind a transaction pooler without LEDGERFLOW_LISTEN_DATABASE_URL: "
                "waiting claims look every LEDGERFLOW_CLAIM_POLL_SECONDS and no principal is cached"
            )
            return
        app_url = get_settings().database_url  # the database whose credentials this connection hears
        conninfo = psycopg_conninfo(url)  # a multi-host DATABASE_URL too (docs/operations.md)
        while True:
            try:
                # named with its process, so that an operator (and a test) can tell whose it is
                name = f"ledgerflow-listener-{os.getpid()}"
                with psycopg.connect(conninfo, autocommit=True, application_name=name) as conn:
                    conn.execute(f"LISTEN {TASK_CHANNEL}")
                    conn.execute(f"LISTEN {CREDENTIALS_CHANNEL}")
                    principals.hearing(app_url)
                    for note in conn.notifies():
                        if note.channel == CREDENTIALS_CHANNEL:
                            principals.changed()
                        else:
                            self._wake(note.payload)
            except Exception as exc:  # claims fall back to their timed look, tokens to a read each
                log.warning("the LISTEN connection was lost: %s", type(exc).__name__)
            finally:
                principals.hearing(None)
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
        """An event set when a task becomes PENDING on one of ``keys`` (``namespace_id:queue``)."""
        self.ensure_started()
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


listener = Listener()
