"""The one way the domain runs SQL: named statements (``Query``), run by ``run`` on the connection's
psycopg driver.

A statement is written once, in full, beside the module that owns its table, under a name:
``X = query("task_complete", "UPDATE workflow_tasks ...")``. ``run(conn, X, params)`` executes it in
``conn``'s transaction (beginning one as SQLAlchemy's autobegin would) with SQLAlchemy's ``:name``
parameters, and returns a ``Result`` with the reading methods of SQLAlchemy's (``first``, ``one``,
``scalar_one``, ``all``, ``mappings``, ``rowcount``; rows with attribute, index and ``_mapping`` access).
A named statement's text never changes, so it is prepared at its first run on a connection (``prepare=True``)
and runs on its prepared plan from then on; an unnamed text is prepared once its connection has run it
``prepare_threshold`` times (psycopg's 5). Neither is prepared when prepared statements are off (behind
PgBouncer 1.18: ``app.db.prepared_statements``).

The statement's name is in the log (``app.sql`` at DEBUG) and, with tracing on, in a span of its own
(``OTEL_DB_SPANS``); tracing changes nothing else: the same statements go out either way.

Errors are SQLAlchemy's exception classes (``DBAPIError.instance``, parameters hidden), and a broken
connection is invalidated as SQLAlchemy does (``Connection.invalidate``).

The one thing written later than its call is what a transaction writes at its commit (``at_commit``:
the engine's event batch with its quota counts), sent in one round trip with the COMMIT itself.

Every statement the domain sends is a named one; a plain text (``run(conn, "SELECT ...")``) still runs,
under no name, for tests and tools. ``observing`` tells a test of every statement run: the hot path runs
only named statements (``tests/engine/test_named_statements.py``), and the whole suite fails a test during
which the domain sent an unnamed one (``tests/sql_names.py``). A search whose optional filters are
``(CAST(:x AS t) IS NULL OR ...)`` predicates is ``planned_each_time`` (never prepared): PostgreSQL plans
it with its values, so each filter given keeps to its index."""

from __future__ import annotations

import logging
import re
import sys
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any, TypeVar, cast

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy import Connection, Engine, TextClause, event
from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound

from app.db import server_not_writable
from app.settings import OTEL_DB_SPANS
from app.sql_text import compact_sql, pyformat

log = logging.getLogger(__name__)

B = TypeVar("B", bound="CommitBuffer")


class Query:
    """One named statement: ``name`` (unique in the program, as River's sqlc names), ``text`` (as
    written, ``:name`` parameters) and ``sql`` (what psycopg is given: comments out, white space folded,
    ``%(name)s`` placeholders).

    ``planned_each_time``: never prepared, so that PostgreSQL plans each execution with its values: a
    search whose optional filters are ``(CAST(:x AS t) IS NULL OR col = :x)`` predicates keeps to the index
    of the filters given (a constant ``NULL IS NULL`` folds away in a plan made with the values; a prepared
    statement's generic plan, made without them, could not use it)."""

    __slots__ = ("name", "text", "sql", "prepare", "module")

    def __init__(
        self, name: str, text: str, *, planned_each_time: bool = False, module: str | None = None
    ) -> None:
        self.name = name
        self.text = text
        # the module whose import defined it (``_importing_module``): docs/statements.sql
        self.module = module
        self.sql = pyformat(compact_sql(text))
        # a named statement is prepared at its first run (psycopg: never when prepared statements are off)
        self.prepare: bool = not planned_each_time

    def __repr__(self) -> str:
        return f"Query({self.name!r})"


# Every named statement of the program, by name (filled as the modules that own them are imported).
QUERIES: dict[str, Query] = {}


def _importing_module() -> str | None:
    """The module whose import runs this (the nearest module-level frame up the stack): where a statement
    is defined, also when a helper of another module made it for that module (``row_access.reading_steps``)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back  # type: ignore[assignment]
    return None if frame is None else frame.f_globals.get("__name__")


def query(name: str, text: str, *, planned_each_time: bool = False) -> Query:
    """The statement ``text`` under ``name``, registered in ``QUERIES``. A name is given once: the same
    name with another text is a programming error."""
    found = QUERIES.get(name)
    if found is not None:
        if found.text != text:
            raise ValueError(f"two statements are named {name!r}")
        return found
    q = QUERIES[name] = Query(name, text, planned_each_time=planned_each_time, module=_importing_module())
    return q


class Template:
    """A maintenance statement whose table names (and DDL's literal bounds) are only known at run time: a
    history partition's DDL (``app.ledger.partitions``). Written once, in full, under a name, with
    ``{field}`` places; ``fill`` gives the ``Query`` to run, under the template's name, never prepared
    (each partition's text is its own). A field takes an identifier (lower-case letters, digits and
    ``_``) or a ``datetime`` (written as its ISO form): nothing else can reach the text."""

    __slots__ = ("name", "text", "module")

    def __init__(self, name: str, text: str, module: str | None = None) -> None:
        self.name = name
        self.text = text
        self.module = module

    def fill(self, **fields: str | datetime) -> Query:
        values: dict[str, str] = {}
        for key, value in fields.items():
            if isinstance(value, datetime):
                values[key] = value.isoformat()
            elif isinstance(value, str) and _IDENTIFIER.fullmatch(value):
                values[key] = value
            else:
                raise ValueError(f"{self.name}: {key}={value!r} is neither an identifier nor a time")
        return Query(self.name, self.text.format(**values), planned_each_time=True)

    def __repr__(self) -> str:
        return f"Template({self.name!r})"


_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# Every template of the program, by name (its names are not statement names: ``QUERIES`` holds those).
TEMPLATES: dict[str, Template] = {}


def template(name: str, text: str) -> Template:
    """The maintenance statement ``text`` with ``{field}`` places under ``name`` (see ``Template``)."""
    found = TEMPLATES.get(name)
    if found is not None:
        if found.text != text:
            raise ValueError(f"two templates are named {name!r}")
        return found
    if name in QUERIES:
        raise ValueError(f"{name!r} names a statement already")
    t = TEMPLATES[name] = Template(name, text, module=_importing_module())
    return t


# Told of every statement ``run`` / ``run_raw`` executes, before it is sent: (name or None, the text
# sent, its parameters). Tests count and read statements so (``observing``); the product adds none.
Observer = Callable[[str | None, str, Mapping[str, Any]], None]
OBSERVERS: list[Observer] = []


@contextmanager
def observing(observer: Observer) -> Iterator[None]:
    """``observer`` is told of every statement run meanwhile (in any thread)."""
    OBSERVERS.append(observer)
    try:
        yield
    finally:
        OBSERVERS.remove(observer)


@lru_cache(maxsize=1024)
def _row_class(names: tuple[str, ...]) -> type[Any]:
    base = namedtuple("Row", names, rename=True)  # type: ignore[misc]  # a name that is no identifier -> _N

    def _mapping(self: tuple) -> dict[str, Any]:
        return dict(zip(names, self, strict=True))

    return type("Row", (base,), {"__slots__": (), "_mapping": property(_mapping)})


# The row class of each statement (its columns never change while the process runs: a migration that
# changes them comes with a new release), so that the column names are decoded once, not per execution.
_ROW_MAKERS: dict[tuple[str, int], Any] = {}
_COLUMN_NAMES: dict[tuple[str, int], tuple[str, ...]] = {}


def column_names(sql: str, cur: psycopg.Cursor) -> tuple[str, ...]:
    """The result columns of ``sql`` just executed on ``cur``, decoded once per statement (psycopg's
    ``dict_row`` decodes them at every execution)."""
    res = cur.pgresult
    key = (sql, res.nfields)  # type: ignore[union-attr]  # None only before a statement ran
    names = _COLUMN_NAMES.get(key)
    if names is None:
        names = tuple(res.fname(i).decode() for i in range(res.nfields))  # type: ignore[union-attr]  # as above
        if len(_COLUMN_NAMES) < 4096:  # bounded: named statements are few, unnamed texts may vary
            _COLUMN_NAMES[key] = names
    return names


def _row_maker(sql: str, cur: psycopg.Cursor) -> Any:
    key = (sql, cur.pgresult.nfields)  # type: ignore[union-attr]  # executed just now: it has a result
    maker = _ROW_MAKERS.get(key)
    if maker is None:
        maker = _row_class(column_names(sql, cur))._make
        if len(_ROW_MAKERS) < 4096:
            _ROW_MAKERS[key] = maker
    return maker


@lru_cache(maxsize=256)
def _split_at(names: tuple[str, ...], prefix: str) -> tuple[list[int], Any, list[int], Any]:
    first = [i for i, n in enumerate(names) if not n.startswith(prefix)]
    second = [i for i, n in enumerate(names) if n.startswith(prefix)]
    return (
        first,
        _row_class(tuple(names[i] for i in first))._make,
        second,
        _row_class(tuple(names[i][len(prefix) :] for i in second))._make,
    )


def split_rows(rows: list[Any], prefix: str) -> tuple[Any, list[Any]]:
    """The rows of a statement that returns one row of its own beside the rows of a read whose columns are
    named ``<prefix><name>`` (``WITH w AS (... RETURNING ...) SELECT w.*, r.... FROM (...) r LEFT JOIN w ON
    <r's first row>``): the one row (its columns, from the first row) and the read's rows (prefix removed),
    each read like ``run``'s rows. ``rows`` is not empty."""
    first, make_first, second, make_second = _split_at(tuple(rows[0]._mapping), prefix)
    return make_first(rows[0][i] for i in first), [make_second(r[i] for i in second) for r in rows]


class Result:
    """The rows of one statement, read eagerly (hot-path statements return a few rows)."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def all(self) -> list[Any]:
        return list(self._rows)

    fetchall = all

    def one(self) -> Any:
        if not self._rows:
            raise NoResultFound("No row was found when one was required")
        if len(self._rows) > 1:
            raise MultipleResultsFound("Multiple rows were found when exactly one was required")
        return self._rows[0]

    def one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise MultipleResultsFound("Multiple rows were found when one or none was required")
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalar_one_or_none(self) -> Any:
        row = self.one_or_none()
        return None if row is None else row[0]

    def scalars(self) -> Result:
        return Result([r[0] for r in self._rows], self.rowcount)

    def mappings(self) -> Result:
        return Result([r._mapping for r in self._rows], self.rowcount)


_CURSOR = "ledgerflow_sql_cursor"
_COMMIT_CURSOR = "ledgerflow_sql_commit_cursor"


def _driver(conn: Connection) -> psycopg.Connection[Any]:
    """The psycopg connection under ``conn``: SQLAlchemy types it as any DBAPI connection (None once
    detached); this module runs on psycopg only, on connections in use."""
    return cast("psycopg.Connection[Any]", conn.connection.driver_connection)


def _cursor(conn: Connection, key: str) -> psycopg.Cursor[Any]:
    pooled = conn.connection
    driver: psycopg.Connection[Any] = pooled.driver_connection  # type: ignore[assignment]  # as in _driver
    cur = pooled.info.get(key)  # one cursor per DBAPI connection and use, made at its first statement here
    if cur is None or cur.closed or cur.connection is not driver:
        cur = pooled.info[key] = driver.cursor()  # tuples; ``_row_maker`` makes them rows
    return cur


def _named(statement: Query | str | TextClause) -> tuple[str | None, str, bool | None]:
    """(name, the text psycopg is given, whether to prepare it) of a statement."""
    if isinstance(statement, Query):
        return statement.name, statement.sql, statement.prepare
    return None, _sent_text(statement.text if isinstance(statement, TextClause) else statement), None


@lru_cache(maxsize=2048)
def _sent_text(text_: str) -> str:
    """An unnamed statement as ``Query`` sends a named one (compacted, psycopg's placeholders)."""
    return pyformat(compact_sql(text_))


# How a statement is traced, when tracing is on: (start(name, text) -> span, end(span, error or None)),
# installed by ``app.observability.tracing`` (which imports this module, not the other way round).
StartSpan = Callable[[str, str], Any]
EndSpan = Callable[[Any, BaseException | None], None]
_spans: tuple[StartSpan, EndSpan] | None = None


def trace_statements(spans: tuple[StartSpan, EndSpan] | None) -> None:
    """Trace every statement with ``spans`` from now on (None: no more)."""
    global _spans
    _spans = spans


def _end_span(span: Any, error: BaseException | None) -> None:
    if span is not None and _spans is not None:
        _spans[1](span, error)


def _observe(name: str | None, sql: str, params: Mapping[str, Any] | None) -> Any:
    """Before an execution: the observers, the log line, and the statement's span (or None)."""
    for observer in OBSERVERS:
        observer(name, sql, params or {})
    if log.isEnabledFor(logging.DEBUG):
        log.debug("sql %s", name or "(unnamed)")
    if _spans is not None and OTEL_DB_SPANS.get():
        return _spans[0](name or sql.split(None, 1)[0].upper(), sql)
    return None


def run(
    conn: Connection, statement: Query | str | TextClause, params: Mapping[str, Any] | None = None
) -> Any:
    """Execute one statement in ``conn``'s transaction (beginning it as SQLAlchemy would); returns a
    ``Result``. The same path whatever listens (tracing, metrics, tests)."""
    name, sql, prepare = _named(statement)
    if not conn.in_transaction():
        conn.begin()  # what SQLAlchemy's autobegin does at a connection's first statement
    cur = _cursor(conn, _CURSOR)
    args = dict(params or {})
    span = _observe(name, sql, args)
    try:
        cur.execute(sql, args, prepare=prepare)
        if cur.pgresult is not None and cur.pgresult.nfields:
            make = _row_maker(sql, cur)
            rows = [make(t) for t in cur.fetchall()]
        else:
            rows = []
    except psycopg.Error as exc:
        _end_span(span, exc)
        raise sqlalchemy_error(conn, exc, sql if name is None else f"{name}: {sql}", args, cur) from exc
    _end_span(span, None)
    return Result(rows, cur.rowcount)


def run_raw(
    cur: psycopg.Cursor[Any], statement: Query, params: Mapping[str, Any] | None, *, prepare: bool | None
) -> psycopg.Cursor[Any]:
    """Execute a named statement on a raw psycopg cursor (the ledger pool's own connection, which has no
    SQLAlchemy around it), observed as ``run`` observes; psycopg's errors are the caller's to handle."""
    span = _observe(statement.name, statement.sql, params)
    try:
        cur.execute(statement.sql, params, prepare=prepare)
    except psycopg.Error as exc:
        _end_span(span, exc)
        raise
    _end_span(span, None)
    return cur


def sqlalchemy_error(
    conn: Connection, exc: psycopg.Error, statement: str, params: Mapping[str, Any], cur: Any = None
) -> BaseException:
    """``exc`` as SQLAlchemy raises a driver's error (its exception classes, parameters hidden); a broken
    connection (or one to a server that no longer takes writes) is invalidated first, as SQLAlchemy does,
    so the pool replaces it."""
    driver = conn.connection.dbapi_connection
    # SQLAlchemy types a driver's error as its DBAPI protocol's; psycopg's is one. A server that no longer
    # takes writes (a failover) counts as broken too (app.db.server_not_writable, as the engine's hook)
    broken = bool(driver is not None and conn.dialect.is_disconnect(cast(Any, exc), driver, cur))
    broken = broken or server_not_writable(exc, driver)
    if broken and not conn.invalidated:
        conn.invalidate(exc)
    return DBAPIError.instance(
        statement,
        params,
        exc,
        psycopg.Error,
        hide_parameters=True,
        connection_invalidated=broken,
        dialect=conn.dialect,
        ismulti=False,
    )


# --------------------------------------------------------------------------- written at commit
# What a transaction writes once, at its commit (the engine's event batch with its quota count changes):
# ``at_commit(conn, key, factory)`` hands out the transaction's buffer for ``key``; at the root
# transaction's commit each buffer's ``statements()`` (named) are sent, then the COMMIT, in one round trip
# (psycopg's pipeline mode); before a savepoint is set they are written (so that a rollback to the
# savepoint undoes exactly what followed it). A rollback drops the buffers.
_BUFFERS = "ledgerflow_sql_buffers"  # (the root transaction, {key: buffer})


class CommitBuffer:
    """What a transaction accumulates to write once at its commit."""

    def statements(self) -> list[tuple[Query, dict[str, Any]]]:  # pragma: no cover - an interface
        raise NotImplementedError


def at_commit(conn: Connection, key: str, factory: Callable[[], B]) -> B:
    """The ``key`` buffer of ``conn``'s transaction (made by ``factory`` at first use)."""
    if not conn.in_transaction():
        conn.begin()
    txn = conn.get_transaction()
    entry = conn.info.get(_BUFFERS)
    if entry is None or entry[0] is not txn:
        buffers: dict[str, Any] = {}  # each key holds the buffer type its factory makes
        entry = conn.info[_BUFFERS] = (txn, buffers)
    found = entry[1].get(key)
    if found is None:
        found = entry[1][key] = factory()
    return found


def _take_buffered(conn: Connection) -> list[tuple[Query, dict[str, Any]]]:
    entry = conn.info.pop(_BUFFERS, None)
    if entry is None or entry[0] is not conn.get_transaction():
        return []
    return [s for buf in entry[1].values() for s in buf.statements()]


# The text of the COMMIT sent in the pipeline of the commit buffers (a cursor execution, unlike the
# driver's own COMMIT): statement counters leave it out (bench.starts, bench.profile_requests).
COMMIT = "COMMIT"


def _write_buffers(conn: Connection, *, commit: bool) -> None:
    """Send the commit buffers' statements; with ``commit`` (the root transaction's commit, about to be
    sent) the COMMIT follows in the same round trip, unless the connection is in autocommit. psycopg reads
    the transaction's state from the server, so the driver's own commit then sends nothing."""
    statements = _take_buffered(conn)
    if not statements:
        return
    driver = _driver(conn)
    cur = _cursor(conn, _COMMIT_CURSOR)
    last = commit and not driver.autocommit
    names = ", ".join(q.name for q, _ in statements)
    try:
        with driver.pipeline():
            for q, params in statements:
                run_raw(cur, q, params, prepare=True)
            if last:
                cur.execute(COMMIT, prepare=False)  # never prepared: a transaction command
    except psycopg.Error as exc:
        raise sqlalchemy_error(conn, exc, names + (", COMMIT" if last else ""), {}, cur) from exc


# Every engine (class listeners): the commit buffers are written before the transaction commits and
# before a savepoint is set; a rollback (to the savepoint or of the whole transaction) drops them.
@event.listens_for(Engine, "commit")
def _write_before_commit(conn: Connection) -> None:
    try:
        _write_buffers(conn, commit=True)
    except Exception:
        # SQLAlchemy sends no ROLLBACK for a transaction whose commit failed (it expects the driver's
        # COMMIT to have ended it): a statement that failed here would leave the server's transaction
        # open, and the connection's next transaction would carry on inside it
        _rollback_quietly(conn)
        raise


def _rollback_quietly(conn: Connection) -> None:
    if conn.invalidated or conn.connection.dbapi_connection is None:
        return
    try:
        _driver(conn).rollback()
    except psycopg.Error:
        pass  # a broken connection: SQLAlchemy invalidates it with the error being raised


@event.listens_for(Engine, "savepoint")
def _write_before_savepoint(conn: Connection, name: str) -> None:
    _write_buffers(conn, commit=False)


@event.listens_for(Engine, "rollback")
@event.listens_for(Engine, "rollback_savepoint")
def _drop_buffers(conn: Connection, *args: Any) -> None:
    if not conn.invalidated:
        conn.info.pop(_BUFFERS, None)


# --------------------------------------------------------------------------- a transaction that wrote nothing
# The rule: a transaction ended without its commit (a read-only request's connection closed, an error, an
# explicit rollback) is rolled back when it wrote anything, and committed when it wrote nothing. Both end
# it alike then, but a ROLLBACK makes psycopg deallocate every statement its connection had prepared
# (``DEALLOCATE ALL``: one more round trip, and each named statement parsed and planned again at its next
# run on the connection), and most API requests are reads that end so.
#
# "Wrote nothing" is PostgreSQL's word, not a guess from the statements' texts: no transaction id was
# assigned (``pg_current_xact_id_if_assigned()`` is NULL). Any row written or locked (``FOR UPDATE``),
# any table created, takes one; what a transaction without one can still change at its commit is only a
# session setting set without ``LOCAL`` or a NOTIFY sent without a write, and the domain sends neither
# (its settings are ``SET LOCAL`` / ``set_config(..., true)``, its NOTIFYs come from triggers on written
# rows). Asked only on a connection that prepares statements (otherwise a ROLLBACK loses nothing) and
# inside a transaction that did not fail (a failed one is rolled back). What the transaction held back
# for its commit (``at_commit``) is never written: the COMMIT is the driver's own, not SQLAlchemy's.
# SQLAlchemy goes on as after a rollback (the after-commit hooks are dropped); the driver's ROLLBACK that
# follows finds no transaction and sends nothing.
TRANSACTION_WROTE = query("transaction_wrote", "SELECT pg_current_xact_id_if_assigned() IS NOT NULL")
_END_CURSOR = "ledgerflow_sql_end_cursor"


@event.listens_for(Engine, "rollback")
def _commit_what_wrote_nothing(conn: Connection) -> None:
    if conn.invalidated or conn.connection.dbapi_connection is None:
        return
    driver = _driver(conn)
    if driver.prepare_threshold is None or driver.info.transaction_status != TransactionStatus.INTRANS:
        return  # nothing prepared to lose; or no transaction, or a failed one: the ROLLBACK stands
    try:
        cur = _cursor(conn, _END_CURSOR)
        row = run_raw(cur, TRANSACTION_WROTE, None, prepare=True).fetchone()
        if row is not None and row[0] is False:
            driver.commit()
    except psycopg.Error:
        pass  # the ROLLBACK that follows ends it (and a broken connection fails there, as before)
