"""The quota check of a start runs on a generic plan once its connection has run it a few times
(migration 0037): PostgreSQL keeps a prepared statement's generic plan only when it costs no more than the
custom plans made with the values, and ``unnest`` of the queues' parameter, estimated at ten rows, priced
the generic plan at ten queues' counts, so the check was planned again at every start."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from app.engine import quotas
from app.ids import new_id
from tests.sql_catalog import as_sent


def _plans(conn: Any) -> dict[str, tuple[int, int]]:
    """(generic, custom) plans of the check's prepared statements on ``conn``, by name: by its text as sent
    (a pooled connection may have prepared it before, and once per set of parameter types)."""
    rows = conn.execute(
        text("SELECT name, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = :s"),
        {"s": as_sent(quotas._SHARED)},
    ).all()
    return {r.name: (r.generic_plans, r.custom_plans) for r in rows}


def test_the_quota_check_is_planned_once_per_connection_not_at_every_start(eng):
    ns = "ns-" + new_id()[:8]
    with eng.connect() as conn:
        before = _plans(conn)
        conn.rollback()
        for _ in range(12):
            with conn.begin():
                quotas.check(conn, ns, new_id(), ["qp.q"])
        after = _plans(conn)
        conn.rollback()
    generic = sum(g - before.get(name, (0, 0))[0] for name, (g, _) in after.items())
    custom = sum(c - before.get(name, (0, 0))[1] for name, (_, c) in after.items())
    # PostgreSQL makes five custom plans before it compares; from then on the generic one
    assert generic + custom == 12 and custom <= 5 and generic >= 7, (generic, custom)
