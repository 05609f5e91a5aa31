"""``app.sql.run`` answers like ``conn.execute(text(...))`` : same transaction, same parameters,
rows read by attribute, index and ``_mapping``, SQLAlchemy's exception classes, and SQLAlchemy's own
path whenever something listens to its cursor events."""

from __future__ import annotations

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import IntegrityError, MultipleResultsFound, NoResultFound, OperationalError

from app.db import transaction
from app.sql import Result, defer, run
from app.sql_text import pyformat
from tests.engine.helpers import statements_seen


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


def test_cursor_event_listeners_see_every_statement(db):
    with statements_seen(db) as seen, transaction(db) as conn:
        assert run(conn, "SELECT CAST(:x AS int) AS x", {"x": 4}).first().x == 4
    assert any("SELECT" in s and "AS x" in s for s in seen)


# --------------------------------------------------------------------------- defer: fewer round trips
def _table(conn) -> None:
    run(conn, "CREATE TEMP TABLE IF NOT EXISTS fast_d (k text PRIMARY KEY) ON COMMIT DELETE ROWS")


def _keys(conn) -> list[str]:
    return [r.k for r in run(conn, "SELECT k FROM fast_d ORDER BY k")]


def test_a_deferred_write_without_rows_works_while_cursor_events_are_listened_to(db):
    """Regression: with a cursor-event listener (OpenTelemetry's database spans, a test counting statements)
    ``defer`` runs the statement at once on SQLAlchemy's path, and read its rows even when it returns none:
    an INSERT without RETURNING raised ResourceClosedError."""
    with statements_seen(db) as seen, transaction(db) as conn:
        _table(conn)
        defer(conn, "INSERT INTO fast_d (k) VALUES (:k)", {"k": "listened"})
        assert _keys(conn) == ["listened"]
    assert any("INSERT INTO fast_d" in s for s in seen)


def test_deferred_statements_run_in_order_before_the_next_statement(db):
    with transaction(db) as conn:
        _table(conn)
        defer(conn, "INSERT INTO fast_d VALUES (:k)", {"k": "a"})
        defer(conn, "INSERT INTO fast_d VALUES (:k || 'b')", {"k": "a"})
        assert _keys(conn) == ["a", "ab"]  # sent with this read, in one round trip, before it
        defer(conn, "INSERT INTO fast_d VALUES ('c')")
        # a statement of SQLAlchemy's own sees them too
        assert conn.execute(text("SELECT count(*) FROM fast_d")).scalar_one() == 3


def test_deferred_statements_run_before_commit_and_vanish_with_a_rollback(db):
    with db.connect() as conn:
        with conn.begin():
            run(conn, "CREATE TEMP TABLE fast_e (k text PRIMARY KEY)")
        with conn.begin():
            defer(conn, "INSERT INTO fast_e VALUES ('committed')")  # nothing follows: the commit sends it
        with pytest.raises(RuntimeError), conn.begin():
            defer(conn, "INSERT INTO fast_e VALUES ('rolled back')")
            raise RuntimeError
        with conn.begin():  # the rolled back transaction's statement is not carried into this one
            assert [r.k for r in run(conn, "SELECT k FROM fast_e")] == ["committed"]


def test_a_rollback_to_a_savepoint_drops_what_followed_it(db):
    with transaction(db) as conn:
        _table(conn)
        defer(conn, "INSERT INTO fast_d VALUES ('before')")
        with pytest.raises(RuntimeError), conn.begin_nested():
            defer(conn, "INSERT INTO fast_d VALUES ('inside')")
            raise RuntimeError
        assert _keys(conn) == ["before"]


def test_a_deferred_statements_error_is_raised_by_the_next_statement(db):
    with pytest.raises(IntegrityError) as e, transaction(db) as conn:
        _table(conn)
        defer(conn, "INSERT INTO fast_d VALUES ('x')")
        defer(conn, "INSERT INTO fast_d VALUES ('x')")
        run(conn, "SELECT 1")
    assert e.value.orig.sqlstate == "23505" and "INSERT INTO fast_d" in str(e.value)
    with transaction(db) as conn:  # the connection is usable again
        assert run(conn, "SELECT 1").scalar_one() == 1


def _executed(monkeypatch) -> list[str]:
    """Every statement the driver executes from now until ``monkeypatch.undo()``, as its text."""
    import psycopg

    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(self, query, *args, **kwargs):
        sent.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    return sent


def test_consecutive_deferred_writes_are_one_statement(db, monkeypatch):
    """Writes queued one after the other reach PostgreSQL as one statement (``combine``), and
    they still see the rows a foreign key names when the same statement inserts them."""
    with transaction(db) as conn:
        run(conn, "CREATE TEMP TABLE fast_p (k text PRIMARY KEY)")
        run(conn, "CREATE TEMP TABLE fast_c (k text REFERENCES fast_p (k))")
        sent = _executed(monkeypatch)
        defer(conn, "INSERT INTO fast_p VALUES (:k)", {"k": "p"})
        defer(conn, "INSERT INTO fast_c VALUES (:k)", {"k": "p"})
        defer(conn, "UPDATE fast_p SET k = k WHERE k = :k", {"k": "nothing"})
        assert run(conn, "SELECT count(*) FROM fast_c").scalar_one() == 1
        monkeypatch.undo()
    assert len(sent) == 2 and sent[0].startswith("WITH w0 AS (INSERT INTO fast_p")


def test_an_insert_of_values_after_deferred_writes_of_other_tables_is_one_statement_with_them(
    db, monkeypatch
):
    """A step's first activation: its task was queued (``defer``), then the step's row is inserted with
    RETURNING. Both reach PostgreSQL as ONE statement (``absorbs``): the INSERT's rows come back as they
    would alone, a foreign key to a row of the same statement holds (checked at its end), and a queued
    write's error is raised by the statement. It failed before: two statements, in one round trip."""
    with transaction(db) as conn:
        run(conn, "CREATE TEMP TABLE fast_s (k text PRIMARY KEY, n int)")
        run(conn, "CREATE TEMP TABLE fast_t (k text PRIMARY KEY, s text NOT NULL REFERENCES fast_s (k))")
        _table(conn)
        sent = _executed(monkeypatch)
        defer(conn, "INSERT INTO fast_t (k, s) VALUES (:k, :s)", {"k": "t1", "s": "s1"})
        defer(conn, "UPDATE fast_d SET k = :k WHERE k = :old", {"k": "x", "old": "none"})
        row = run(
            conn,
            "INSERT INTO fast_s (k, n) VALUES (:k, :n) ON CONFLICT (k) DO NOTHING RETURNING k, n",
            {"k": "s1", "n": 1},
        ).one()
        monkeypatch.undo()
        assert (row.k, row.n) == ("s1", 1)
        assert run(conn, "SELECT s FROM fast_t").scalar_one() == "s1"
    assert len(sent) == 1 and sent[0].startswith("WITH w0 AS (INSERT INTO fast_t")
    with pytest.raises(IntegrityError) as e, transaction(db) as conn:
        run(conn, "CREATE TEMP TABLE fast_u (k text PRIMARY KEY)")
        run(conn, "CREATE TEMP TABLE fast_v (k text PRIMARY KEY)")
        run(conn, "INSERT INTO fast_u VALUES ('x')")
        defer(conn, "INSERT INTO fast_u VALUES ('x')")  # a duplicate key
        run(conn, "INSERT INTO fast_v (k) VALUES (:k)", {"k": "y"})
    assert e.value.orig.sqlstate == "23505" and "fast_u" in str(e.value)


def test_a_statement_that_may_read_a_deferred_write_is_sent_after_it(db, monkeypatch):
    """An INSERT of the same table, or one that reads a table, still sees the deferred rows (its own
    statement, after them)."""
    with transaction(db) as conn:
        _table(conn)
        sent = _executed(monkeypatch)
        defer(conn, "INSERT INTO fast_d VALUES (:k)", {"k": "a"})
        run(conn, "INSERT INTO fast_d (k) VALUES ('b') ON CONFLICT (k) DO NOTHING")
        defer(conn, "INSERT INTO fast_d VALUES (:k)", {"k": "c"})
        run(conn, "INSERT INTO fast_d (k) SELECT k || 'x' FROM fast_d WHERE k = 'c'")
        monkeypatch.undo()
        assert _keys(conn) == ["a", "b", "c", "cx"]
    assert len(sent) == 4


def test_commit_buffers_are_written_at_commit_and_dropped_by_a_rollback(db):
    """``app.sql.buffer``: what a transaction accumulates is written once, at its commit (or when a
    savepoint is set: a rollback to it drops only what was buffered after it)."""
    from app.sql import CommitBuffer, buffer

    class Keys(CommitBuffer):
        def __init__(self) -> None:
            self.keys: list[str] = []

        def statements(self) -> list:
            return (
                [("INSERT INTO fast_b SELECT unnest(CAST(:k AS text[]))", {"k": self.keys})]
                if self.keys
                else []
            )

    with db.connect() as conn:
        with conn.begin():
            run(conn, "CREATE TEMP TABLE fast_b (k text)")
        with conn.begin():
            buffer(conn, "keys", Keys).keys.append("a")
            buffer(conn, "keys", Keys).keys.append("b")
            assert run(conn, "SELECT count(*) FROM fast_b").scalar_one() == 0  # not before the commit
        with pytest.raises(RuntimeError), conn.begin():
            buffer(conn, "keys", Keys).keys.append("rolled back")
            raise RuntimeError
        with conn.begin():
            buffer(conn, "keys", Keys).keys.append("before")
            with pytest.raises(RuntimeError), conn.begin_nested():
                buffer(conn, "keys", Keys).keys.append("inside")
                raise RuntimeError
        with conn.begin():
            assert [r.k for r in run(conn, "SELECT k FROM fast_b ORDER BY k")] == ["a", "b", "before"]


def test_a_deferred_statements_rows_reach_its_reader_inside_the_transaction(db, monkeypatch):
    """``defer(..., on_rows=...)``: the statement rides in the next round trip like any deferred one, on
    its own (never combined with the writes around it), and its rows reach the reader before the commit,
    whether a later statement or the commit's own flush sends it, and on SQLAlchemy's path too."""
    got: list[list] = []
    with transaction(db) as conn:
        _table(conn)
        sent = _executed(monkeypatch)
        defer(conn, "INSERT INTO fast_d VALUES ('a')")
        defer(conn, "INSERT INTO fast_d VALUES ('b') RETURNING k", on_rows=lambda rows: got.append(rows))
        defer(conn, "INSERT INTO fast_d VALUES ('c')")
        defer(conn, "INSERT INTO fast_d VALUES ('d')")
        assert got == []
        assert _keys(conn) == ["a", "b", "c", "d"]
        monkeypatch.undo()
        assert [[tuple(r) for r in rows] for rows in got] == [[("b",)]]
        # a (combined) write, the read statement, a (combined) pair of writes, then the read
        assert len(sent) == 4 and sent[2].startswith("WITH w0 AS (INSERT INTO fast_d VALUES ('c')")
        defer(conn, "DELETE FROM fast_d WHERE k = 'zz' RETURNING k", on_rows=lambda rows: got.append(rows))
    assert got[1] == []  # sent by the commit's flush; no row
    listened: list[str] = []
    with transaction(db) as conn:
        event.listen(conn, "before_cursor_execute", lambda *a: listened.append(a[2]))
        defer(conn, "SELECT 7 AS n", on_rows=lambda rows: got.append(rows))
        assert got[2][0].n == 7 and len(listened) == 1  # taken at once on SQLAlchemy's path


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


def test_the_commit_rides_in_the_round_trip_of_the_statements_deferred_to_it(db, monkeypatch):
    """The statements a transaction deferred to its commit and the COMMIT itself go in ONE round trip (one
    pipeline, synced once); what they wrote is committed; the driver's own commit then sends nothing."""
    with db.connect() as conn:
        with conn.begin():
            run(conn, "CREATE TEMP TABLE fast_k (k text PRIMARY KEY)")
        conn.begin()
        run(conn, "SELECT 1")  # the transaction is open on the server
        defer(conn, "INSERT INTO fast_k VALUES ('a')")
        defer(conn, "SELECT 1")  # not a write: a statement of its own, in the same round trip
        waits, commands = _sent(monkeypatch)
        conn.commit()
        monkeypatch.undo()
        assert commands == [], commands
        assert [w for w in waits if w != "BaseCursor._execute_gen"] == [
            "BasePipeline._enter_gen",
            "BasePipeline._exit_gen",  # the one sync: INSERT, SELECT, COMMIT
            "BaseConnection._commit_gen",  # SQLAlchemy's commit: nothing left to send
        ], waits
        assert conn.connection.driver_connection.info.transaction_status == 0  # IDLE: committed
        with conn.begin():
            assert run(conn, "SELECT k FROM fast_k").scalars().all() == ["a"]


def test_a_failing_statement_deferred_to_the_commit_commits_nothing(db):
    """Regression: SQLAlchemy sends no ROLLBACK after a failed commit, so a statement that failed at the
    commit left the server's transaction open (aborted), and the connection's next transaction failed."""
    with db.connect() as conn:
        with conn.begin():
            run(conn, "CREATE TEMP TABLE fast_f (k text PRIMARY KEY)")
            run(conn, "INSERT INTO fast_f VALUES ('taken')")
        with pytest.raises(IntegrityError) as e, conn.begin():
            run(conn, "INSERT INTO fast_f VALUES ('first')")
            defer(conn, "INSERT INTO fast_f VALUES ('taken')")
        assert e.value.orig.sqlstate == "23505" and "INSERT INTO fast_f" in str(e.value)
        with conn.begin():  # nothing of it committed, and the connection is usable
            assert run(conn, "SELECT k FROM fast_f").scalars().all() == ["taken"]


def test_a_reader_of_a_statement_deferred_to_the_commit_runs_before_the_commit(db, monkeypatch):
    """A deferred statement with a reader (``on_rows``) keeps its reader inside the transaction: the
    COMMIT is not sent with it, and a reader that refuses what it read rolls the transaction back.
    Regression: the transaction stayed open on the server, and the connection's next one went on inside it
    (it saw, and would have committed, the refused write)."""

    def refuse(rows: list) -> None:
        raise RuntimeError(f"refused {len(rows)} rows")

    with db.connect() as conn:
        with conn.begin():
            run(conn, "CREATE TEMP TABLE fast_r (k text PRIMARY KEY)")
        with pytest.raises(RuntimeError, match="refused 1 rows"), conn.begin():
            defer(conn, "INSERT INTO fast_r VALUES ('a') RETURNING k", on_rows=refuse)
        with conn.begin():
            assert run(conn, "SELECT count(*) FROM fast_r").scalar_one() == 0
            defer(conn, "INSERT INTO fast_r VALUES ('b') RETURNING k", on_rows=lambda rows: None)
            _, commands = _sent(monkeypatch)
        monkeypatch.undo()
        assert commands == [b"COMMIT"]  # after the reader, on its own
        with conn.begin():
            assert run(conn, "SELECT k FROM fast_r").scalars().all() == ["b"]


def test_an_autocommit_connection_sends_its_deferred_statements_without_a_commit(db, monkeypatch):
    """In autocommit each statement commits itself: the commit's flush sends what was deferred and no
    COMMIT (PostgreSQL would warn of no transaction in progress)."""
    with db.connect() as setup, setup.begin():
        run(setup, "CREATE TABLE IF NOT EXISTS fast_auto (k text PRIMARY KEY)")
        run(setup, "TRUNCATE fast_auto")
    try:
        with db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            with conn.begin():
                sent = _executed(monkeypatch)
                defer(conn, "INSERT INTO fast_auto VALUES ('a')")
            monkeypatch.undo()
        assert "COMMIT" not in sent and any("fast_auto" in s for s in sent), sent
        with transaction(db) as conn:
            assert run(conn, "SELECT k FROM fast_auto").scalars().all() == ["a"]
    finally:
        with transaction(db) as conn:
            run(conn, "DROP TABLE IF EXISTS fast_auto")
