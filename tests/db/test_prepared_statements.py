"""Named statements run on prepared plans from their first run: ``app.sql.run`` prepares a named statement
(``Query``) at its first execution on a connection, an unnamed text only once its connection ran it
psycopg's ``prepare_threshold`` times, and the engine's connections keep more prepared statements than there
are named statements (``app.db.PREPARED_MAX``), so none is deallocated to make room for another."""

from __future__ import annotations

import importlib

from sqlalchemy import Engine

from actors.handler_modules import BUILTIN_HANDLER_MODULES
from app.db import PREPARED_MAX
from app.sql import QUERIES, query, run

PROBE = query("test_prepared_probe", "SELECT CAST(:x AS int) + 1 AS y")
PREPARED = "SELECT statement FROM pg_prepared_statements"


def test_a_named_statement_is_prepared_at_its_first_run(engine: Engine):
    with engine.connect() as conn:
        conn.invalidate()  # a fresh connection: nothing prepared on it yet
    with engine.connect() as conn:
        assert run(conn, PROBE, {"x": 1}).scalar_one() == 2
        prepared = run(conn, PREPARED).scalars().all()
        conn.rollback()
    assert any("CAST($1 AS int) + 1" in s for s in prepared), prepared


def test_an_unnamed_text_is_not_prepared_at_its_first_run(engine: Engine):
    with engine.connect() as conn:
        conn.invalidate()
    with engine.connect() as conn:
        run(conn, "SELECT CAST(:x AS int) + 2 AS y", {"x": 1})
        prepared = run(conn, PREPARED).scalars().all()
        conn.rollback()
    assert not any("CAST($1 AS int) + 2" in s for s in prepared), prepared


def test_every_named_statement_fits_in_a_connections_prepared_statements(engine: Engine):
    import web  # every module of the API and the workers registers its statements at import

    web.create_app()
    for name in BUILTIN_HANDLER_MODULES:
        importlib.import_module(name)
    with engine.connect() as conn:
        assert conn.connection.driver_connection.prepared_max == PREPARED_MAX  # type: ignore[union-attr]
    # room left for the unnamed texts a connection runs often (operators' reads)
    assert len(QUERIES) <= PREPARED_MAX * 3 // 4, len(QUERIES)
