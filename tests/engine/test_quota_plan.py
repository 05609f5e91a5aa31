"""The quota check of a start runs on a generic plan once its connection has run it a few times
(migration 0037): PostgreSQL keeps a prepared statement's generic plan only when it costs no more than the
custom plans made with the values, and ``unnest`` of the queues' parameter, estimated at ten rows, priced
the generic plan at ten queues' counts, so the check was planned again at every start."""

from __future__ import annotations

from sqlalchemy import text

from app.engine import quotas
from app.ids import new_id


def test_the_quota_check_is_planned_once_per_connection_not_at_every_start(eng):
    ns = "ns-" + new_id()[:8]
    with eng.connect() as conn:
        for _ in range(12):
            with conn.begin():
                quotas.check(conn, ns, new_id(), ["qp.q"])
        generic, custom = conn.execute(
            text(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE '%sum(unfinished)%' AND statement LIKE '%pg_advisory_xact_lock_shared%'"
            )
        ).one()
        conn.rollback()
    # PostgreSQL makes five custom plans before it compares; from then on the generic one
    assert custom <= 5 and generic >= 7, (generic, custom)
