"""``app.sql.run`` answers like ``conn.execute(text(...))`` : same transaction, same parameters,
rows read by attribute, index and ``_mapping``, SQLAlchemy's exception classes (through its public
``DBAPIError.instance``; a broken connection invalidated); one path whatever listens; what a transaction
writes at its commit (``at_commit``) goes in the COMMIT's round trip."""

from __future__ import annotations

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import IntegrityError, MultipleResultsFound, NoResultFound, OperationalError

from app.db import transaction
from app.sql import CommitBuffer, Query, Result, at_commit, query, run
from app.sql_text import pyformat


def test_placeholders_casts_and_percent_signs():
    assert pyformat("SELECT CAST(:b AS int), x::text, 'x%' LIKE :c") == (
        "SELECT CAST(%(b)s AS int), x::text, 'x%%' LIKE %(c)s"
    )
    # as in SQLAlchemy's text(): a name followed by a colon is no parameter (write CAST(:a AS text))
    assert pyformat("SELECT :a::text") == "SELECT :a::text"
    assert pyformat(r"SELECT '12:30', \:literal") == "SELECT '12:30', :literal"


def test_rows_read_like_sqlalchemy_rows(db):
    with transaction(db) as conn:
        res = run(conn, "SELECT 1 AS one, 'x' AS two, CAST(:p AS int) AS three, 'a%' AS pct", {"p": 3})
        assert isinstance(res, Result)
        row = res.one()
        assert (row.one, row[1], row._mapping["three"], row.pct) == (1, "x", 3, "a%")
        assert dict(row._mapping) == {"one": 1, "two": "x", "three": 3, "pct": "a%"}
        one, two, three, _ = row
        assert (one, two, three) == (1, "x", 3)
        assert run(conn, "SELECT 5").scalar_one() == 5
        assert run(conn, "SELECT 1 WHERE false").first() is None
        assert run(conn, "SELECT 1 WHERE false").scalar() is None
        assert [r.n for r in run(conn, "SELECT generate_series(1, 3) AS n")] == [1, 2, 3]
        assert run(conn, "SELECT generate_series(1, 3)").scalars().all() == [1, 2, 3]
        assert run(conn, "SELECT 7 AS n").mappings().first() == {"n": 7}
        with pytest.raises(NoResultFound):
            run(conn, "SELECT 1 WHERE false").one()
        with pytest.raises(MultipleResultsFound):
            run(conn, "SELECT generate_series(1, 2)").one()


def test_same_transaction_and_rowcount(db):
    with transaction(db) as conn:
        run(conn, "CREATE TEMP TABLE fast_t (k text PRIMARY KEY, v int) ON COMMIT DROP")
        assert run(conn, "INSERT INTO fast_t VALUES ('a', 1), ('b', 2)").rowcount == 2
        # SQLAlchemy's path sees the fast path's writes: one transaction
        assert conn.execute(text("SELECT count(*) FROM fast_t")).scalar_one() == 2
        assert run(conn, "UPDATE fast_t SET v = v + 1 WHERE k = :k", {"k": "a"}).rowcount == 1


def test_errors_are_sqlalchemys_and_the_connection_stays_usable(db):
    with pytest.raises(IntegrityError) as e, transaction(db) as conn:
        run(conn, "CREATE TEMP TABLE fast_u (k text PRIMARY KEY)")
        run(conn, "INSERT INTO fast_u VALUES (:k), (:k)", {"k": "same"})
    assert e.value.orig.sqlstate == "23505"
    assert "parameters hidden" in str(e.value)  # as on SQLAlchemy's path (hide_parameters)
    with pytest.raises(OperationalError) as e2, transaction(db) as conn:
        run(conn, "SET LOCAL statement_timeout = 10")
        run(conn, "SELECT pg_sleep(1)")
    assert e2.value.orig.sqlstate == "57014"
    with transaction(db) as conn:  # the pooled connection is clean again
        assert run(conn, "SELECT 1").scalar_one() == 1


def test_a_first_statement_begins_the_transaction_as_sqlalchemy_would(db):
    with db.connect() as conn:
        run(conn, "CREATE TEMP TABLE fast_v (k int)")
        assert conn.in_transaction()
        run(conn, "INSERT INTO fast_v VALUES (1)")
        conn.rollback()
        with pytest.raises(Exception, match="fast_v"):
            run(conn, "SELECT * FROM fast_v")


def test_sqlalchemy_cursor_listeners_do_not_change_the_path(db, monkeypatch):
    """Whatever listens to SQLAlchemy's cursor events, ``run`` sends the statement on the driver itself
    (there is one path: tracing and tests see the same statements as production)."""
    import psycopg

    listened: list[str] = []
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(self, q, *args, **kwargs):
        sent.append(str(q))
        return execute(self, q, *args, **kwargs)

    with transaction(db) as conn:
        event.listen(conn, "before_cursor_execute", lambda *a: listened.append(a[2]))
        monkeypatch.setattr(psycopg.Cursor, "execute", counted)
        assert run(conn, "SELECT CAST(:x AS int) AS x", {"x": 4}).first().x == 4
        monkeypatch.undo()
    assert sent == ["SELECT CAST(%(x)s AS int) AS x"] and listened == []


def test_a_name_names_one_statement():
    q = query("test_fast_path_one", "SELECT 1 -- a comment\n  AS one")
    assert isinstance(q, Query) and q.sql == "SELECT 1 AS one" and query("test_fast_path_one", q.text) is q
    with pytest.raises(ValueError, match="test_fast_path_one"):
        query("test_fast_path_one", "SELECT 2")


def test_a_broken_connection_is_invalidated_and_the_pool_replaces_it(db):
    """What SQLAlchemy's private ``_handle_dbapi_exception`` did, with its public API: the error is an
    OperationalError that says the connection was invalidated, and the next checkout is a new one."""
    with pytest.raises(OperationalError) as e, transaction(db) as conn:
        pid = run(conn, "SELECT pg_backend_pid()").scalar_one()
        with db.connect() as killer, killer.begin():
            run(killer, "SELECT pg_terminate_backend(:p)", {"p": pid})
        run(conn, "SELECT 1")
    assert e.value.connection_invalidated
    with transaction(db) as conn:
        assert run(conn, "SELECT pg_backend_pid()").scalar_one() != pid


# --------------------------------------------------------------------------- written at commit
_FAST_B = query("test_fast_path_buffered", "INSERT INTO fast_b SELECT unnest(CAST(:k AS text[]))")


class _Keys(CommitBuffer):
    def __init__(self) -> None:
        self.keys: list[str] = []

    def statements(self) -> list:
        return [(_FAST_B, {"k": self.keys})] if self.keys else []


def test_commit_buffers_are_written_at_commit_and_dropped_by_a_rollback(db):
    """``app.sql.at_commit``: what a transaction accumulates is written once, at its commit (or when a
    savepoint is set: a rollback to it drops only what was buffered after it)."""
    with db.connect() as conn:
        with conn.begin():
            run(conn, "CREATE TEMP TABLE fast_b (k text)")
        with conn.begin():
            at_commit(conn, "keys", _Keys).keys.append("a")
            at_commit(conn, "keys", _Keys).keys.append("b")
            assert run(conn, "SELECT count(*) FROM fast_b").scalar_one() == 0  # not before the commit
        with pytest.raises(RuntimeError), conn.begin():
            at_commit(conn, "keys", _Keys).keys.append("rolled back")
            raise RuntimeError
        with conn.begin():
            at_commit(conn, "keys", _Keys).keys.append("before")
            with pytest.raises(RuntimeError), conn.begin_nested():
                at_commit(conn, "keys", _Keys).keys.append("inside")
                raise RuntimeError
        with conn.begin():
            assert [r.k for r in run(conn, "SELECT k FROM fast_b ORDER BY k")] == ["a", "b", "before"]


# --------------------------------------------------------------------------- the commit's round trip
def _sent(monkeypatch) -> tuple[list[str], list[bytes]]:
    """What the driver waits for (``psycopg.Connection.wait``: once per statement queued, pipeline entered
    or left, transaction command), and the transaction commands it sends on their own (BEGIN, COMMIT,
    ROLLBACK: ``_exec_command``; a COMMIT executed by a cursor in a pipeline is not one of them)."""
    import psycopg

    waits: list[str] = []
    commands: list[bytes] = []
    wait, exec_command = psycopg.Connection.wait, psycopg.Connection._exec_command

    def waited(self, gen, *args, **kwargs):
        waits.append(getattr(gen, "__qualname__", repr(gen)))
        return wait(self, gen, *args, **kwargs)

    def command(self, cmd, *args, **kwargs):
        commands.append(bytes(cmd) if isinstance(cmd, bytes | bytearray) else str(cmd).encode())
        return exec_command(self, cmd, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "wait", waited)
    monkeypatch.setattr(psycopg.Connection, "_exec_command", command)
    return waits, commands


_FAST_K = query("test_fast_path_commit_k", "INSERT INTO fast_k SELECT unnest(CAST(:k AS text[]))")


class _CommitKeys(CommitBuffer):
    def __init__(self, q: Query) -> None:
        self.q = q
        self.keys: list[str] = []

    def statements(self) -> list:
        return [(self.q, {"k": self.keys})]


def test_the_commit_rides_in_the_round_trip_of_what_is_written_at_commit(db, monkeypatch):
    """The statements a transaction writes at its commit and the COMMIT itself go in ONE round trip (one
    pipeline, synced once); what they wrote is committed; the driver's own commit then sends nothing."""
    with db.connect() as conn:
        with conn.begin():
            run(conn, "CREATE TEMP TABLE fast_k (k text PRIMARY KEY)")
        conn.begin()
        run(conn, "SELECT 1")  # the transaction is open on the server
        at_commit(conn, "k", lambda: _CommitKeys(_FAST_K)).keys.append("a")
        waits, commands = _sent(monkeypatch)
        conn.commit()
        monkeypatch.undo()
        assert commands == [], commands
        assert [w for w in waits if w != "BaseCursor._execute_gen"] == [
            "BasePipeline._enter_gen",
            "BasePipeline._exit_gen",  # the one sync: INSERT, COMMIT
            "BaseConnection._commit_gen",  # SQLAlchemy's commit: nothing left to send
        ], waits
        assert conn.connection.driver_connection.info.transaction_status == 0  # IDLE: committed
        with conn.begin():
            assert run(conn, "SELECT k FROM fast_k").scalars().all() == ["a"]


_FAST_F = query("test_fast_path_commit_f", "INSERT INTO fast_f SELECT unnest(CAST(:k AS text[]))")


def test_a_failing_statement_written_at_commit_commits_nothing(db):
    """SQLAlchemy sends no ROLLBACK after a failed commit: a statement that failed at the commit must not
    leave the server's transaction open (aborted) for the connection's next transaction. The error names
    the statement."""
    with db.connect() as conn:
        with conn.begin():
            run(conn, "CREATE TEMP TABLE fast_f (k text PRIMARY KEY)")
            run(conn, "INSERT INTO fast_f VALUES ('taken')")
        with pytest.raises(IntegrityError) as e, conn.begin():
            run(conn, "INSERT INTO fast_f VALUES ('first')")
            at_commit(conn, "f", lambda: _CommitKeys(_FAST_F)).keys.append("taken")
        assert e.value.orig.sqlstate == "23505" and "test_fast_path_commit_f" in str(e.value)
        with conn.begin():  # nothing of it committed, and the connection is usable
            assert run(conn, "SELECT k FROM fast_f").scalars().all() == ["taken"]


_FAST_AUTO = query("test_fast_path_commit_auto", "INSERT INTO fast_auto SELECT unnest(CAST(:k AS text[]))")


def test_an_autocommit_connection_writes_its_commit_buffers_without_a_commit(db, monkeypatch):
    """In autocommit each statement commits itself: the commit sends what was buffered and no COMMIT
    (PostgreSQL would warn of no transaction in progress)."""
    import psycopg

    with db.connect() as setup, setup.begin():
        run(setup, "CREATE TABLE IF NOT EXISTS fast_auto (k text PRIMARY KEY)")
        run(setup, "TRUNCATE fast_auto")
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(self, q, *args, **kwargs):
        sent.append(str(q))
        return execute(self, q, *args, **kwargs)

    try:
        with db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            with conn.begin():
                monkeypatch.setattr(psycopg.Cursor, "execute", counted)
                at_commit(conn, "auto", lambda: _CommitKeys(_FAST_AUTO)).keys.append("a")
            monkeypatch.undo()
        assert "COMMIT" not in sent and any("fast_auto" in s for s in sent), sent
        with transaction(db) as conn:
            assert run(conn, "SELECT k FROM fast_auto").scalars().all() == ["a"]
    finally:
        with transaction(db) as conn:
            run(conn, "DROP TABLE IF EXISTS fast_auto")


def test_a_statement_planned_each_time_is_never_prepared(db):
    """``planned_each_time`` (a search whose optional filters fold away in a plan made with their values):
    never a server-side prepared statement however often it runs, while a named statement is prepared once
    it ran as often as psycopg's threshold asks."""
    searched = query(
        "test_planned_each_time",
        "SELECT CAST(:x AS int) IS NULL OR 1 = CAST(:x AS int)",
        planned_each_time=True,
    )
    prepared = query("test_prepared_once_often", "SELECT 1 = CAST(:x AS int)")
    with transaction(db) as conn:
        for i in range(12):
            assert run(conn, searched, {"x": None if i % 2 else 1}).scalar_one() is True
            assert run(conn, prepared, {"x": 1}).scalar_one() is True
        statements = [r[0] for r in conn.execute(text("SELECT statement FROM pg_prepared_statements")).all()]
    assert not any("IS NULL OR 1 =" in s for s in statements), statements
    assert any(s.startswith("SELECT 1 = CAST($1 AS int)") for s in statements), statements
