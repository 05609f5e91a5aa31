"""Database time and a statement's time limit, as named statements: every due / lease / deadline decision
uses the database's clock (L-CLAIM-6), never the process's."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection

from app.sql import query, run

DB_NOW = query("db_now", "SELECT now()")
# whether a time (NULL: never) is past, by the database's clock
IS_PAST = query("db_is_past", "SELECT CAST(:d AS timestamptz) <= now()")
# A statement time limit for the rest of the transaction (or until a rollback to the savepoint it was set
# in), as ``SET LOCAL statement_timeout`` but a statement with a parameter: ``:ms`` in milliseconds, text
STATEMENT_TIMEOUT_LOCAL = query(
    "db_statement_timeout_local", "SELECT set_config('statement_timeout', CAST(:ms AS text), true)"
)


def db_now(conn: Connection) -> datetime:
    """Database time: every due/lease/deadline decision uses it (L-CLAIM-6)."""
    return run(conn, DB_NOW).scalar_one()


def is_past(conn: Connection, t: datetime | None) -> bool:
    """Whether ``t`` is past by database time (never, for None)."""
    return bool(run(conn, IS_PAST, {"d": t}).scalar())


def local_statement_timeout(conn: Connection, ms: int) -> None:
    """Statements of ``conn``'s transaction from now on are cancelled after ``ms`` milliseconds."""
    run(conn, STATEMENT_TIMEOUT_LOCAL, {"ms": str(int(ms))})
