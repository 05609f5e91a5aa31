"""Hand-written SQL on the hot paths, run on the connection's psycopg driver.

``run(conn, sql, params)`` is what ``conn.execute(text(sql), params)`` does for a text statement —
same transaction, same ``:name`` parameters, same errors (SQLAlchemy's exception classes, with a
broken connection invalidated as SQLAlchemy does), and a result with the same reading methods
(``first``, ``one``, ``scalar_one``, ``all``, ``mappings``, ``rowcount``; rows with attribute, index
and ``_mapping`` access) — at about a third of the Python cost: SQLAlchemy builds a result description
per execution of a text statement (psycopg column objects plus its own column map: ~0.1-0.2 ms of CPU
for a 27-column row), which a workflow start paid some 30 times.

When anything listens to SQLAlchemy's cursor events (OpenTelemetry's database spans, a test counting
statements), ``run`` takes SQLAlchemy's own path, so those listeners still see every statement."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any, TypeVar, cast

import psycopg
from sqlalchemy import Connection, Engine, TextClause, event, text
from sqlalchemy.exc import MultipleResultsFound, NoResultFound

from app.sql_text import absorbed, absorbs, combine, pyformat

B = TypeVar("B", bound="CommitBuffer")


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
        if len(_COLUMN_NAMES) < 4096:  # bounded: statements are the program's, but f-strings vary
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


def _listened(conn: Connection) -> bool:
    d = conn.dispatch
    return bool(d.before_cursor_execute) or bool(d.after_cursor_execute)


_CURSOR = "ledgerflow_sql_cursor"
_DEFERRED_CURSOR = "ledgerflow_sql_deferred_cursor"
_DEFERRED = "ledgerflow_sql_deferred"  # (the root transaction, [(sql, params), ...], {index: on_rows})


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


Deferred = tuple[list[tuple[str, dict[str, Any]]], dict[int, Callable[[list[Any]], None]]]


def _take_deferred(conn: Connection) -> Deferred:
    """The statements ``defer`` queued in this transaction, and the readers of those whose rows are read
    (by index); none of a transaction that ended without running them: the queue names its transaction."""
    entry = conn.info.pop(_DEFERRED, None)
    if entry is None or entry[0] is not conn.get_transaction():
        return [], {}
    return entry[1], entry[2]


def defer(
    conn: Connection,
    statement: str | TextClause,
    params: Mapping[str, Any] | None = None,
    *,
    now: bool = True,
    on_rows: Callable[[list[Any]], None] | None = None,
) -> None:
    """Queue a statement whose result nobody waits for (an insert of a row nothing reads back in this
    transaction, a setting): it is sent with the transaction's next statement, or before its commit, in
    one round trip (psycopg's pipeline mode), in the order of the calls. Its error, if any, is raised
    there. ``on_rows``: called with the statement's rows once they are back, still inside the transaction
    (before its commit); such a statement is sent on its own, never combined. Taken at once, as ``run``,
    when SQLAlchemy's cursor events are listened to (``now``; the commit's own flush passes False: it
    sends what it queued itself)."""
    sql = statement.text if isinstance(statement, TextClause) else statement
    if now and _listened(conn):
        result = run(conn, sql, params)
        if on_rows is not None:  # such a statement returns rows; an INSERT without RETURNING has none to read
            on_rows(result.all())
        return
    if not conn.in_transaction():
        conn.begin()
    txn = conn.get_transaction()
    entry = conn.info.get(_DEFERRED)
    if entry is None or entry[0] is not txn:
        queued: Deferred = ([], {})
        entry = conn.info[_DEFERRED] = (txn, *queued)
    statements, readers = entry[1], entry[2]
    if on_rows is not None:
        readers[len(statements)] = on_rows
    statements.append((sql, dict(params or {})))


def _send_deferred(conn: Connection, deferred: Deferred) -> list[tuple[psycopg.Cursor[Any], Callable]]:
    """Inside an open pipeline: queue the deferred statements, each run of consecutive writes as ONE
    statement (``combine``), their results dropped, except those with a reader: each on a cursor of its
    own, returned with its reader for ``_pipelined`` to call once the pipeline has synced."""
    statements, readers = deferred
    dcur = _cursor(conn, _DEFERRED_CURSOR)
    reading: list[tuple[psycopg.Cursor[Any], Callable]] = []
    start = 0
    for i in sorted(readers) + [len(statements)]:
        for sql, args in combine(statements[start:i]):
            dcur.execute(pyformat(sql), args)
        if i < len(statements):
            cur = _driver(conn).cursor()
            cur.execute(pyformat(statements[i][0]), statements[i][1])
            reading.append((cur, readers[i]))
        start = i + 1
    return reading


def _pipelined(conn: Connection, deferred: Deferred, last: Callable[[], object] | None = None) -> None:
    """The deferred statements, then ``last`` (a statement of the caller's), in one round trip; then the
    readers of the deferred statements get their rows."""
    with _driver(conn).pipeline():
        reading = _send_deferred(conn, deferred)
        if last is not None:
            last()
    for cur, on_rows in reading:
        rows = cur.fetchall() if cur.pgresult is not None and cur.pgresult.nfields else []
        cur.close()
        on_rows(rows)


def run(conn: Connection, statement: str | TextClause, params: Mapping[str, Any] | None = None) -> Any:
    """Execute one text statement in ``conn``'s transaction (beginning it as SQLAlchemy would), after
    the statements ``defer`` queued, in the same round trip (in the same statement when ``absorbs`` says
    the outcome is the same: an ``INSERT ... VALUES`` after writes of other tables); returns a ``Result``
    (or SQLAlchemy's own result when cursor events are listened to)."""
    sql = statement.text if isinstance(statement, TextClause) else statement
    if _listened(conn):
        return conn.execute(text(sql), dict(params or {}))
    if not conn.in_transaction():
        conn.begin()  # what SQLAlchemy's autobegin does at a connection's first statement
    cur = _cursor(conn, _CURSOR)
    args = dict(params or {})
    deferred = _take_deferred(conn)
    try:
        if deferred[0] and not deferred[1] and absorbs(deferred[0], sql):
            # the queued writes and this INSERT as one statement (one statement less to parse, plan, send)
            one, merged = absorbed(deferred[0], sql, args)
            cur.execute(pyformat(one), merged)
        elif deferred[0]:
            _pipelined(conn, deferred, lambda: cur.execute(pyformat(sql), args))
        else:
            cur.execute(pyformat(sql), args)
        if cur.pgresult is not None and cur.pgresult.nfields:
            make = _row_maker(sql, cur)
            rows = [make(t) for t in cur.fetchall()]
        else:
            rows = []
    except psycopg.Error as exc:
        # SQLAlchemy's rules: wrap in its exception classes, invalidate a broken connection (the cursor is
        # ours to keep: it stays open for the connection's next statement)
        failed = "; ".join([d[0] for d in deferred[0]] + [sql])
        conn._handle_dbapi_exception(exc, failed, args, None, None)
    return Result(rows, cur.rowcount)


# Per-transaction buffers written once, at commit (one event batch per transaction and instance,
# one quota-count change per transaction): ``buffer(conn, key, factory)`` hands out the transaction's
# buffer for ``key``; right before the deferred statements are sent at commit (or before a savepoint is
# set), each buffer's ``statements()`` are deferred after the others. A rollback drops the buffers, and a
# rollback to a savepoint drops what was buffered since it (they were written when it was set).
_BUFFERS = "ledgerflow_sql_buffers"  # (the root transaction, {key: buffer})


class CommitBuffer:
    """What a transaction accumulates to write once at its commit."""

    def statements(self) -> list[tuple[str, dict[str, Any]]]:  # pragma: no cover - an interface
        raise NotImplementedError


def buffer(conn: Connection, key: str, factory: Callable[[], B]) -> B:
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


def _drain_buffers(conn: Connection) -> None:
    entry = conn.info.pop(_BUFFERS, None)
    if entry is None or entry[0] is not conn.get_transaction():
        return
    for buf in entry[1].values():
        for sql, params in buf.statements():
            defer(conn, sql, params, now=False)


def _flush(conn: Connection, *, buffers: bool = False, commit: bool = False) -> None:
    """Send the deferred statements (with ``buffers``: the commit buffers' first). With ``commit`` (the
    root transaction's commit, about to be sent): the COMMIT goes in the same round trip, after them,
    unless a reader waits for the rows of one (a reader runs inside the transaction: its COMMIT then
    follows on its own, as SQLAlchemy sends it) or the connection is in autocommit (nothing to commit).
    The driver's own commit then finds nothing open."""
    if buffers:
        _drain_buffers(conn)
    deferred = _take_deferred(conn)
    if not deferred[0]:
        return
    last = _committer(conn) if commit and not deferred[1] and not _driver(conn).autocommit else None
    try:
        _pipelined(conn, deferred, last)
    except psycopg.Error as exc:
        failed = [d[0] for d in deferred[0]] + ([COMMIT] if last is not None else [])
        conn._handle_dbapi_exception(exc, "; ".join(failed), {}, None, None)


# The text of the COMMIT that ``_flush`` pipelines (a cursor execution, unlike the driver's own COMMIT):
# statement counters leave it out (bench.starts, bench.profile_requests).
COMMIT = "COMMIT"


def _committer(conn: Connection) -> Callable[[], object]:
    """The COMMIT of ``conn``'s transaction as a pipelined statement. psycopg reads the transaction's
    state from the server (libpq's transaction status), so its ``commit()`` after this one sends nothing;
    never prepared (a transaction command)."""
    cur = _cursor(conn, _DEFERRED_CURSOR)
    return lambda: cur.execute(COMMIT, prepare=False)


# Every engine (class listeners): the deferred statements of a transaction run before SQLAlchemy executes
# a statement of its own on the connection (so that it sees them), before the transaction commits and
# before a savepoint is set (so that a rollback to the savepoint undoes exactly what followed it); a
# rollback, to the savepoint or of the whole transaction, drops those not sent yet.
@event.listens_for(Engine, "before_execute")
def _flush_before_execute(conn: Connection, *args: Any) -> None:
    _flush(conn)


@event.listens_for(Engine, "commit")
def _flush_before_commit(conn: Connection) -> None:
    try:
        _flush(conn, buffers=True, commit=True)
    except Exception:
        # SQLAlchemy sends no ROLLBACK for a transaction whose commit failed (it expects the driver's
        # COMMIT to have ended it): a statement or a reader that failed here would leave the server's
        # transaction open, and the connection's next transaction would carry on inside it
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
def _flush_before_savepoint(conn: Connection, name: str) -> None:
    _flush(conn, buffers=True)


@event.listens_for(Engine, "rollback")
@event.listens_for(Engine, "rollback_savepoint")
def _drop_deferred(conn: Connection, *args: Any) -> None:
    if not conn.invalidated:
        conn.info.pop(_DEFERRED, None)
        conn.info.pop(_BUFFERS, None)
