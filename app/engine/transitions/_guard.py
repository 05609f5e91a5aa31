"""The one helper of the engine's transitions: run a guarded statement and refuse when no row matched."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Row

from app.errors import StateConflict
from app.sql import Query, run


class TransitionRefused(StateConflict):
    """A guarded transition matched no row: the row is not in one of the states the move may leave
    (someone else moved it first). Inside a request this is a 409 STATE_CONFLICT; inside a job the
    transaction rolls back and the ledger retries the job (a fresh snapshot decides again)."""

    def __init__(self, what: str, row_id: str, allowed: Iterable[str]) -> None:
        self.what = what
        self.row_id = row_id
        self.allowed = tuple(allowed)
        super().__init__(f"{what} refused for {row_id}: its state is not one of {', '.join(self.allowed)}")


def states(values: Iterable[str]) -> list[str]:
    return sorted(str(v) for v in values)


def one(conn: Connection, what: str, row_id: str, allowed: Iterable[str], sql: Query, params: dict) -> Row:
    """Execute ``sql`` (which must end in ``RETURNING``) and return its single row, or raise."""
    row = run(conn, sql, params).first()
    if row is None:
        raise TransitionRefused(what, row_id, states(allowed))
    return row


def maybe(conn: Connection, sql: Query, params: dict) -> Row | None:
    """A conditional move (``try_*``): no row is a normal answer (not due, already settled)."""
    return run(conn, sql, params).first()


def many(conn: Connection, sql: Query, params: dict) -> list[Any]:
    """A set move (every matching row of an instance / activation): zero rows is a normal answer."""
    return list(run(conn, sql, params).all())
