"""Databases of an earlier revision filled by today's code (the migration tests): today's statements may
call a function or write a column a later migration creates, which such a database is given first."""

from __future__ import annotations

from sqlalchemy import Engine, text

from app.migrate import migration_module

__all__ = ["migration_module", "todays_functions"]


def todays_functions(engine: Engine) -> None:
    """The SQL functions today's statements call and the columns they write, as their migrations create
    them (``CREATE OR REPLACE``, ``IF NOT EXISTS``: the upgrade that follows creates them again)."""
    with engine.begin() as conn:
        conn.execute(text(migration_module("0037_queue_list_rows").FUNCTION))
        conn.execute(text(migration_module("0038_event_batches_json").COLUMNS))
