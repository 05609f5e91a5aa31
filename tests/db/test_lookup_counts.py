"""The console's bounded counts (``app.engine.lookup.count_jobs``): a count stops at its cap, and a
count that would take longer than its budget gives up (None) without harming the caller's transaction
or its settings."""

from __future__ import annotations

from sqlalchemy import text

from app.db import transaction
from app.engine import lookup
from app.ledger import job_reads
from app.ledger.enqueue import enqueue


def test_a_count_stops_at_its_cap(db):
    """The cap, not the time budget (the next test's): a budget a busy machine cannot miss (the default
    150 ms of a statement planned each time ran out once in CI and the count answered None)."""
    with transaction(db) as conn:
        for i in range(7):
            enqueue(conn, "webhook_delivery", {"n": i})
    ample = 30_000
    with db.connect() as conn, conn.begin():
        assert lookup.count_jobs(conn, job_reads.JobFilter(), cap=100, budget_ms=ample) == 7
        assert lookup.count_jobs(conn, job_reads.JobFilter(), cap=5, budget_ms=ample) == 6  # cap + 1: "5+"
        assert lookup.count_jobs(conn, job_reads.JobFilter(statuses=("dead",)), cap=5, budget_ms=ample) == 0


def test_a_count_over_its_budget_gives_up_and_leaves_the_transaction_usable(db):
    with db.connect() as locker, locker.begin():
        locker.execute(text("LOCK TABLE workflow_jobs IN ACCESS EXCLUSIVE MODE"))  # the count must wait
        with db.connect() as conn, conn.begin():
            before = conn.execute(text("SHOW statement_timeout")).scalar_one()
            assert lookup.count_jobs(conn, job_reads.JobFilter(), cap=100, budget_ms=200) is None
            assert conn.execute(text("SELECT 1")).scalar_one() == 1  # the transaction goes on
            assert conn.execute(text("SHOW statement_timeout")).scalar_one() == before
