"""A transaction that wrote nothing ends with a COMMIT, not a ROLLBACK: psycopg deallocates every statement
its connection had prepared at a ROLLBACK (``DEALLOCATE ALL``, then each named statement is parsed and
planned again at its next run), and a read-only API request ends its transaction without committing (its
connection closes, or an error leaves it). A transaction that wrote anything is still rolled back, however it
ended: a write left without a commit (a dry run, an error) never lands (``app.sql``, "A transaction that
wrote nothing")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, event

from app.errors import NotFound
from app.sql import query, run

PROBE = query("test_read_rule_probe", "SELECT CAST(:x AS int) + 41 AS y")
PREPARED = "SELECT statement FROM pg_prepared_statements"
EFFECT = "INSERT INTO workflow_job_effects (operation_key, step_key) VALUES ('read-rule', :step)"
EFFECTS = "SELECT step_key FROM workflow_job_effects WHERE operation_key = 'read-rule' ORDER BY step_key"


def _pid(conn: Connection) -> int:
    return conn.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]


@contextmanager
def _on_backend(engine: Engine, pid: int) -> Iterator[Connection]:
    """The pooled connection of backend ``pid``: the pool's connections are checked out (and held) until
    it comes; each one's session, and so its prepared statements, is that backend's."""
    with ExitStack() as held:
        for _ in range(engine.pool.checkedin()):  # type: ignore[attr-defined]  # a QueuePool
            conn = held.enter_context(engine.connect())
            if _pid(conn) == pid:
                yield conn
                return
        raise AssertionError(f"backend {pid} is not in the pool")


def _prepared_on(engine: Engine, pid: int) -> list[str]:
    with _on_backend(engine, pid) as conn:
        statements = list(run(conn, PREPARED).scalars().all())
        conn.commit()  # ends this look without a rollback, whatever the rule under test does
    return statements


def test_a_read_left_without_a_commit_keeps_its_connections_prepared_statements(engine: Engine):
    with engine.connect() as conn:
        assert run(conn, PROBE, {"x": 1}).scalar_one() == 42  # a named statement: prepared at its first run
        pid = _pid(conn)
    # the connection closed in its transaction, as a read-only request's does (``with get_engine().connect()``)
    assert any("CAST($1 AS int) + 41" in s for s in _prepared_on(engine, pid))


def test_a_read_that_raised_keeps_its_connections_prepared_statements(engine: Engine):
    with pytest.raises(NotFound), engine.connect() as conn, conn.begin():
        run(conn, PROBE, {"x": 1})
        pid = _pid(conn)
        raise NotFound("nothing here")  # a 404 of a read: it wrote nothing
    assert any("CAST($1 AS int) + 41" in s for s in _prepared_on(engine, pid))


def test_a_transaction_that_wrote_is_rolled_back_however_it_ended(db: Engine):
    with db.connect() as conn:
        run(conn, PROBE, {"x": 1})
        run(conn, EFFECT, {"step": "left-without-commit"})  # a dry run: its writes are dropped at the end
    with pytest.raises(NotFound), db.connect() as conn, conn.begin():
        run(conn, EFFECT, {"step": "then-raised"})
        raise NotFound("refused after a write")
    with db.connect() as conn:
        run(conn, EFFECT, {"step": "rolled-back"})
        conn.rollback()
        run(conn, EFFECT, {"step": "committed"})
        conn.commit()
        assert run(conn, EFFECTS).scalars().all() == ["committed"]
        conn.commit()


def test_a_read_only_request_leaves_its_connections_prepared_statements_in_place(client, token, clean):
    """A read of the API that ends in a 404 (its connection closed without a commit, by an error):
    the statements it prepared are still prepared on the connection afterwards."""
    auth = {"Authorization": "Bearer " + token("workflows:read", namespace="readers")}
    client.get("/v1/workflows/" + "0" * 32, headers=auth)  # the credential cached, connections warm
    used: list[int] = []

    def on_checkout(dbapi: Any, record: Any, proxy: Any) -> None:
        used.append(dbapi.info.backend_pid)

    event.listen(clean.pool, "checkout", on_checkout)
    try:
        resp = client.get("/v1/workflows/" + "0" * 32, headers=auth)
    finally:
        event.remove(clean.pool, "checkout", on_checkout)
    assert resp.status_code == 404, resp.get_data(as_text=True)
    assert used
    for pid in set(used):
        assert _prepared_on(clean, pid), f"backend {pid} lost its prepared statements"
