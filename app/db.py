"""Engine, short transactions with after-commit hooks, and database time."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.exc import DisconnectionError

from app.settings import STATEMENT_TIMEOUT_MS, get_settings

log = logging.getLogger(__name__)

_AFTER_COMMIT = "ledgerflow_after_commit"
# Per-transaction scratch state (e.g. the queues already hinted); dropped with the hooks on commit
# and on rollback, so nothing leaks into the next transaction of the pooled connection.
_TX_STATE = "ledgerflow_tx_state"


def _drop_transaction_state(conn: Connection) -> None:
    if conn.invalidated:  # the connection died (database restart, terminated backend): nothing to drop,
        return  # and touching ``conn.info`` now would raise PendingRollbackError over the real error
    conn.info.pop(_AFTER_COMMIT, None)
    conn.info.pop(_TX_STATE, None)


def statement_timeout_ms() -> int:
    """``LEDGERFLOW_STATEMENT_TIMEOUT_MS`` (default 30 000; 0 = none): the longest one SQL statement
    of the API or a worker may run before PostgreSQL cancels it."""
    return STATEMENT_TIMEOUT_MS.get()


# How long a pooled connection may sit idle and still be handed out without a ping (the database may have
# restarted meanwhile). 0 (the default, every process but the web server) pings at every checkout, as
# SQLAlchemy's ``pool_pre_ping``: a worker's handler that met a dead connection would fail its job's
# attempt. The web server (``web.create_app``) pings only after 2 s idle: an API request checks out twice
# (authentication, then its work), and a ping each time was two of the eight round trips of an
# authenticated read. A connection that breaks while in steady use fails its statement instead (503:
# resend with the same key), and SQLAlchemy then replaces every connection of the pool made before the
# failure (issue 16).
_ping_after_idle_seconds = 0.0
_IDLE_SINCE = "ledgerflow_idle_since"


def ping_after_idle(seconds: float) -> None:
    """Ping a pooled connection at checkout only when it sat idle for ``seconds`` or more."""
    global _ping_after_idle_seconds
    _ping_after_idle_seconds = seconds


def _ping_on_checkout(engine: Engine) -> None:
    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_conn: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        since = record.info.pop(_IDLE_SINCE, None)
        if since is None or time.monotonic() - since < _ping_after_idle_seconds:
            return  # a new connection, or one in steady use
        try:
            engine.dialect.do_ping(dbapi_conn)
        except engine.dialect.loaded_dbapi.Error as exc:
            if engine.dialect.is_disconnect(exc, dbapi_conn, None):
                raise DisconnectionError(str(exc)) from exc  # the pool connects anew and tries again
            raise


@lru_cache(maxsize=8)
def _engine_for(url: str) -> Engine:
    engine = create_engine(
        url,
        pool_size=10,
        max_overflow=20,
        # a database error never carries the statement's parameters (tenant data, tokens) into an
        # exception message, a log line or a job's last_error (issue 9)
        hide_parameters=True,
        # A worker never holds a transaction across a handler or an HTTP call; this is the safety net.
        # statement_timeout (issue 9): no single statement of a request or a job runs unbounded
        connect_args={
            "options": "-c idle_in_transaction_session_timeout=60000 -c timezone=UTC "
            f"-c statement_timeout={statement_timeout_ms()}"
        },
    )

    _ping_on_checkout(engine)

    @event.listens_for(engine, "rollback")
    def _drop_hooks(conn: Connection) -> None:  # a rollback publishes nothing (L-CLAIM-4)
        _drop_transaction_state(conn)

    @event.listens_for(engine, "commit")
    def _drop_state(conn: Connection) -> None:
        # the scratch state ends with its transaction however it was committed (``engine.begin()``
        # too); the after-commit hooks stay for ``transaction()`` to run
        conn.info.pop(_TX_STATE, None)

    return engine


def get_engine(url: str | None = None) -> Engine:
    return _engine_for(url or get_settings().database_url)


def after_commit(conn: Connection, fn: Callable[[], None]) -> None:
    """Run ``fn`` once the transaction of ``conn`` has committed (never after a rollback)."""
    conn.info.setdefault(_AFTER_COMMIT, []).append(fn)


def transaction_state(conn: Connection) -> dict:
    """A dict that lives exactly as long as ``conn``'s current transaction."""
    return conn.info.setdefault(_TX_STATE, {})


def _run_hooks(conn: Connection) -> None:
    conn.info.pop(_TX_STATE, None)
    for fn in conn.info.pop(_AFTER_COMMIT, []):
        try:
            fn()
        except Exception:  # a failed hook never undoes the committed fact
            log.exception("after-commit hook failed")


@contextmanager
def transaction(engine: Engine | None = None) -> Iterator[Connection]:
    """One short transaction; after-commit hooks (wake hints) run only after a successful commit."""
    engine = engine or get_engine()
    with engine.connect() as conn:
        try:
            with conn.begin():
                yield conn
        except BaseException:
            _drop_transaction_state(conn)
            raise
        _run_hooks(conn)


def db_now(conn: Connection) -> datetime:
    """Database time: every due/lease/deadline decision uses it (L-CLAIM-6)."""
    return conn.execute(text("SELECT now()")).scalar_one()
