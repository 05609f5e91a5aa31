"""Per-namespace caps on what a tenant may create (automation rules, subscriptions, schedules) that hold
under concurrent creates.

Counting and then inserting is a race in READ COMMITTED: concurrent creates each count the rows
committed before them, none sees the others', and all insert (16 parallel creates at 92 of 100 ended at
107). ``reserve`` takes a transaction-scoped advisory lock of (table, namespace) before it counts, so the
creates of one namespace's rows of one kind serialize for the rest of their short transaction, and each
count sees every create committed before it. Creates of other namespaces or other kinds do not wait.
"""

from __future__ import annotations

from sqlalchemy import Connection

from app.errors import LimitExceeded
from app.sql import query, run

# the rows of a namespace in each table that keeps a cap (each by its namespace index)
_COUNTS = {
    table: query(f"{table}_count_in_namespace", f"SELECT count(*) FROM {table} WHERE namespace_id = :ns")
    for table in ("automation_rules", "event_subscriptions", "workflow_schedules")
}


_CAP_LOCK = query(
    "cap_lock",
    "SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))",
)


def reserve(conn: Connection, table: str, namespace_id: str, limit: int, code: str, message: str) -> int:
    """Lock the namespace's creates of ``table`` until ``conn``'s transaction ends, then count its rows:
    409 ``code`` with ``message`` when there are ``limit`` already. Returns the count."""
    if table not in _COUNTS:
        raise ValueError(f"no cap is kept for {table}")
    run(conn, _CAP_LOCK, {"k": f"lf-cap:{table}:{namespace_id}"})
    count = run(conn, _COUNTS[table], {"ns": namespace_id}).scalar_one()
    if count >= limit:
        raise LimitExceeded(code, message)
    return count
