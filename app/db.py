"""Engine, short transactions with after-commit hooks and a typed context each (``Tx``), and database time."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import psycopg
from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DisconnectionError

from app.settings import (
    DB_CONNECT_TIMEOUT_SECONDS,
    DB_TRANSACTION_POOLING,
    PREPARED_STATEMENTS,
    STATEMENT_TIMEOUT_MS,
    get_settings,
    normalize_database_url,
)

log = logging.getLogger(__name__)

_AFTER_COMMIT = "ledgerflow_after_commit"
_TX = "ledgerflow_tx"  # the connection's ``Tx`` (of its current transaction; see ``tx``)


@dataclass(eq=False)
class Tx:
    """What one transaction knows besides its rows, typed, in one object: made when the transaction begins
    (``transaction()``; any other transaction's at its first ``tx(conn)``), bound to it (a later
    transaction of the pooled connection gets a new one) and dropped at its commit or rollback. Every
    field is a fact of this transaction only, so a decision it saves (a statement not sent) is never
    taken on what another transaction did."""

    transaction: object  # SQLAlchemy's root transaction this one belongs to
    # The instance row this transaction locked first, before its job's row (the job's ``lock_first``,
    # ``app.ledger.context.JobContext.transaction``), as it read it; the engine's write that follows takes
    # it (``handlers.common.run_locked_once``) instead of reading the row again. None: not locked that way,
    # or taken.
    locked_instance: dict[str, Any] | None = None
    # The engine's watch (``app.engine.jobs_and_tasks``): per instance, the earliest due time (seconds from
    # the transaction's ``now()``) its watch is known to have in this transaction (``arm_watch`` arms it,
    # ``watch_covers`` knows it from an open task, ``watch_cleared`` forgets it)...
    watch_due: dict[str, float] = field(default_factory=dict)
    # ... and the instances this transaction inserted, which have no watch yet (``watch_absent``).
    watch_absent: set[str] = field(default_factory=set)
    # The queues a wake hint is registered for, sent once the transaction commits (``app.ledger.hints``).
    hinted_queues: set[str] = field(default_factory=set)
    # Jobs enqueued per (type, pool), counted in the metrics once the transaction commits (None: none yet;
    # ``app.ledger.enqueue``).
    enqueued_counts: dict[tuple[str, str], int] | None = None

    def take_locked_instance(self) -> dict[str, Any] | None:
        """The instance row this transaction locked first, once (None the second time)."""
        row, self.locked_instance = self.locked_instance, None
        return row


def _drop_transaction_state(conn: Connection) -> None:
    if conn.invalidated:  # the connection died (database restart, terminated backend): nothing to drop,
        return  # and touching ``conn.info`` now would raise PendingRollbackError over the real error
    conn.info.pop(_AFTER_COMMIT, None)
    conn.info.pop(_TX, None)


def statement_timeout_ms() -> int:
    """``LEDGERFLOW_STATEMENT_TIMEOUT_MS`` (default 30 000; 0 = none): the longest one SQL statement
    of the API or a worker may run before PostgreSQL cancels it."""
    return STATEMENT_TIMEOUT_MS.get()


def transaction_pooling() -> bool:
    """``LEDGERFLOW_DB_TRANSACTION_POOLING`` (default off): DATABASE_URL reaches PostgreSQL through a
    pooler in transaction mode (PgBouncer ``pool_mode = transaction``), which hands each transaction to
    any server connection. Then the session settings are set in every transaction (``SET LOCAL``)
    instead of at connect (PgBouncer refuses the ``options`` startup parameter), prepared statements are
    off by default, and the long-poll LISTEN needs its own direct URL (web/long_poll.py)."""
    return DB_TRANSACTION_POOLING.get()


def prepared_statements() -> bool:
    """``LEDGERFLOW_PREPARED_STATEMENTS`` (default on; off with transaction pooling): psycopg prepares a
    statement run often on its connection (``prepare_threshold``) and the pool's pass is always prepared.
    PgBouncer before 1.21 (Debian 12 has 1.18) cannot follow a prepared statement from one transaction
    to the next server connection, so behind it they must be off (the cost: bench/pass_latency.py)."""
    chosen = PREPARED_STATEMENTS.get()
    return not transaction_pooling() if chosen is None else chosen


def session_settings() -> dict[str, str]:
    """What every connection of the API and the workers sets for its session."""
    return {
        # A worker never holds a transaction across a handler or an HTTP call; this is the safety net.
        "idle_in_transaction_session_timeout": "60000",
        "timezone": "UTC",
        # no single statement of a request or a job runs unbounded
        "statement_timeout": str(statement_timeout_ms()),
    }


# What this process's connections say they are (``application_name``, seen in ``pg_stat_activity`` and the
# server's log): ``ledgerflow-<process>``, named by each process at its start (web, worker-advance,
# worker-outbound, scheduler, release); any other use of the code (the CLI, a script) is ``ledgerflow-cli``.
# The pool's own connection and the web's LISTEN connection name themselves (``ledgerflow-advance-pool``,
# ``ledgerflow-listener``).
_process_name = "ledgerflow-cli"


def name_process(process: str) -> None:
    """Every database connection this process opens from now on is ``ledgerflow-<process>``."""
    global _process_name
    _process_name = f"ledgerflow-{process}"


def application_name() -> str:
    return _process_name


def connect_args(options: dict[str, str] | None = None) -> dict[str, Any]:
    """psycopg's connect arguments: the process's ``application_name``; ``options`` (session settings)
    as the ``options`` startup parameter (not with transaction pooling: see ``transaction_pooling``),
    and ``prepare_threshold=None`` when prepared statements are off."""
    args: dict[str, Any] = {"application_name": application_name()}
    if options and not transaction_pooling():
        args["options"] = " ".join(f"-c {k}={v}" for k, v in options.items())
    if not prepared_statements():
        args["prepare_threshold"] = None
    return args


def _set_per_transaction(engine: Engine, settings: dict[str, str]) -> None:
    """Behind a transaction pooler: the session settings at the start of every transaction (one round
    trip), as ``SET LOCAL``, so that they hold on whichever server connection runs it."""
    sql = "SELECT " + ", ".join(f"set_config('{k}', '{v}', true)" for k, v in settings.items())

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None  # a connection in use has its DBAPI connection
        if not dbapi.autocommit:  # an autocommit read (authentication) is one statement: nothing to hold
            dbapi.execute(sql)  # psycopg opens the transaction (BEGIN) first


# How long a pooled connection may sit idle and still be handed out without a ping (the database may have
# restarted meanwhile). 0 (the default, every process but the web server) pings at every checkout, as
# SQLAlchemy's ``pool_pre_ping``: a worker's handler that met a dead connection would fail its job's
# attempt. The web server (``web.create_app``) pings only after 2 s idle: an API request checks out twice
# (authentication, then its work), and a ping each time was two of the eight round trips of an
# authenticated read. A connection that breaks while in steady use fails its statement instead (503:
# resend with the same key), and SQLAlchemy then replaces every connection of the pool made before the
# failure (docs/decisions/api-and-security.md, "Pooled connections are pinged after an idle spell").
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


# High availability (docs/operations.md, "High availability"). DATABASE_URL may name a primary and its
# standbys (libpq's multi-host form with ``target_session_attrs=read-write``): a new connection goes to
# whichever host accepts writes now. A connection made before a failover is dropped by the old primary's
# shutdown (57P01 / 57P02 / 57P03 or a closed socket, which SQLAlchemy already counts as a disconnect), or
# meets a server that no longer accepts writes: SQLSTATE 25006 (``cannot execute ... in a read-only
# transaction``) while the server reports itself in hot standby or read-only by default. Those errors
# count as a disconnect too: SQLAlchemy then drops the connection and every pooled connection made
# before it, the web answers 503 UNAVAILABLE with Retry-After (web/errors.py), and the next checkout
# connects to the new primary. A 25006 of a transaction declared READ ONLY by the code itself (a bug)
# stays an error.
_SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})  # admin / crash shutdown, cannot connect now
_READ_ONLY_TRANSACTION = "25006"


def server_not_writable(exc: BaseException, dbapi_conn: Any) -> bool:
    """Whether the database error ``exc`` on ``dbapi_conn`` (a psycopg connection, or None) means the
    server is going away or no longer accepts writes (a failover), not a fault of the statement."""
    state = getattr(exc, "sqlstate", None)
    if state in _SERVER_GONE:
        return True
    if state != _READ_ONLY_TRANSACTION:
        return False
    pgconn = getattr(dbapi_conn, "pgconn", None)
    if pgconn is None:
        return True  # no session to ask: treat it as the server's state, the safer reading
    reported = {
        name: (pgconn.parameter_status(name.encode()) or b"").decode()
        for name in ("in_hot_standby", "default_transaction_read_only")
    }
    return "on" in reported.values()


def _drop_on_failover(engine: Engine) -> None:
    @event.listens_for(engine, "handle_error")
    def _failover(ctx: ExceptionContext) -> None:
        if ctx.is_disconnect or ctx.original_exception is None:
            return
        try:
            dbapi_conn = ctx.connection.connection.dbapi_connection if ctx.connection is not None else None
        except Exception:  # no live connection to ask (it failed while connecting)
            dbapi_conn = None
        if server_not_writable(ctx.original_exception, dbapi_conn):
            ctx.is_disconnect = True  # the pool drops it and every connection made before it


def with_connect_timeout(url: str | URL) -> URL:
    """``url`` (libpq's multi-host form accepted) with ``connect_timeout`` =
    ``LEDGERFLOW_DB_CONNECT_TIMEOUT_SECONDS`` unless it names its own: each host of a multi-host URL is
    tried that long before the next."""
    parsed = make_url(normalize_database_url(url) if isinstance(url, str) else url)
    if "connect_timeout" in parsed.query:
        return parsed
    return parsed.update_query_dict({"connect_timeout": str(DB_CONNECT_TIMEOUT_SECONDS.get())})


def psycopg_conninfo(url: str) -> str:
    """A libpq connection string for a connection opened with psycopg itself (the LISTEN connection):
    the same hosts, database and parameters as the engine's, multi-host URLs included."""
    parsed = with_connect_timeout(url).set(drivername="postgresql+psycopg")
    _, params = parsed.get_dialect()().create_connect_args(parsed)
    return psycopg.conninfo.make_conninfo("", **params)


# The prepared statements a connection keeps (psycopg's default is 100, the least recently used one
# deallocated past it: a round trip, and a new preparation at its next run). Every named statement is
# prepared at its first run on a connection (app.sql), so the cap is above their number (about 415 once every statement was named),
# and unnamed texts run often fit beside them.
PREPARED_MAX = 1024


@lru_cache(maxsize=8)
def _engine_for(url: str) -> Engine:
    engine = create_engine(
        with_connect_timeout(url),
        pool_size=10,
        max_overflow=20,
        # a database error never carries the statement's parameters (tenant data, tokens) into an
        # exception message, a log line or a job's last_error
        hide_parameters=True,
        connect_args=connect_args(session_settings()),
    )
    if transaction_pooling():
        _set_per_transaction(engine, session_settings())

    _ping_on_checkout(engine)
    _drop_on_failover(engine)

    @event.listens_for(engine, "connect")
    def _keep_prepared(dbapi_conn: Any, conn_rec: Any) -> None:
        dbapi_conn.prepared_max = PREPARED_MAX

    @event.listens_for(engine, "do_connect")
    def _name_connection(dialect: Any, conn_rec: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        cparams["application_name"] = application_name()  # as named when it connects, not when created

    @event.listens_for(engine, "rollback")
    def _drop_hooks(conn: Connection) -> None:  # a rollback publishes nothing (L-CLAIM-4)
        _drop_transaction_state(conn)

    @event.listens_for(engine, "commit")
    def _drop_state(conn: Connection) -> None:
        # the transaction's ``Tx`` ends with it however it was committed (``engine.begin()`` too); the
        # after-commit hooks stay for ``transaction()`` to run
        conn.info.pop(_TX, None)

    return engine


def get_engine(url: str | None = None) -> Engine:
    return _engine_for(url or get_settings().database_url)


def after_commit(conn: Connection, fn: Callable[[], object]) -> None:
    """Run ``fn`` once the transaction of ``conn`` has committed (never after a rollback)."""
    conn.info.setdefault(_AFTER_COMMIT, []).append(fn)


def tx(conn: Connection) -> Tx:
    """The ``Tx`` of ``conn``'s current transaction (beginning one, as SQLAlchemy's autobegin would, when
    none is open): the one ``transaction()`` made, else one made now for this transaction."""
    if not conn.in_transaction():
        conn.begin()
    root = conn.get_transaction()
    found: Tx | None = conn.info.get(_TX)
    if found is None or found.transaction is not root:
        found = conn.info[_TX] = Tx(root)
    return found


def _run_hooks(conn: Connection) -> None:
    conn.info.pop(_TX, None)
    for fn in conn.info.pop(_AFTER_COMMIT, []):
        try:
            fn()
        except Exception:  # a failed hook never undoes the committed fact
            log.exception("after-commit hook failed")


@contextmanager
def transaction(engine: Engine | None = None) -> Iterator[Connection]:
    """One short transaction with its context (``Tx``, made here as it begins); after-commit hooks (wake
    hints) run only after a successful commit. An exception rolls it back (one that wrote nothing is
    committed instead, which ends it alike and keeps the connection's prepared statements: ``app.sql``,
    "a transaction that wrote nothing")."""
    engine = engine or get_engine()
    with engine.connect() as conn:
        try:
            with conn.begin() as root:
                conn.info[_TX] = Tx(root)
                yield conn
        except BaseException:
            _drop_transaction_state(conn)
            raise
        _run_hooks(conn)
