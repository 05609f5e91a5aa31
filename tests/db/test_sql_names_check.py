"""The suite-wide check of named statements (``tests/sql_names.py``) tells a statement of the domain sent
under no name from a test's own, and names the place that sent it."""

from __future__ import annotations

from sqlalchemy import text

from app.db import transaction
from app.sql import query, run
from tests import sql_names


def _as_if_in(path: str, source: str, conn) -> None:
    """Run ``source`` as code of the repository file ``path`` (its frames carry that file name)."""
    exec(compile(source, str(sql_names.ROOT / path), "exec"), {"run": run, "text": text, "conn": conn})


def test_an_unnamed_statement_of_the_domain_is_caught_with_its_place(db):
    assert sql_names.ENABLED
    sql_names.taken()  # nothing of an earlier test
    named = query("test_names_check_named", "SELECT 2")
    with transaction(db) as conn:
        _as_if_in("app/engine/somewhere.py", "run(conn, 'SELECT 1 AS unnamed_plain')", conn)
        _as_if_in("web/somewhere.py", "conn.execute(text('SELECT 1 AS unnamed_sqlalchemy'))", conn)
        exec(  # a named one is fine
            compile("run(conn, named)", str(sql_names.ROOT / "app/engine/somewhere.py"), "exec"),
            {"run": run, "conn": conn, "named": named},
        )
        # a test's own statements, a migration's and SQLAlchemy's are not the domain's
        run(conn, "SELECT 1 AS a_tests_own")
        conn.execute(text("SELECT 1 AS a_tests_own_too"))
        _as_if_in("migrations/versions/x.py", "conn.execute(text('SELECT 1 AS a_migrations'))", conn)
    found = sql_names.taken()
    assert len(found) == 2, found
    assert found[0].startswith("app/engine/somewhere.py:1 (<module>): SELECT 1 AS unnamed_plain"), found
    assert found[1].startswith("web/somewhere.py:1 (<module>): SELECT 1 AS unnamed_sqlalchemy"), found
