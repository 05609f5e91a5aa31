"""The settlement of finished jobs looks each settled job up by its primary key: its work does not grow
with the jobs the table keeps (finished ones stay until retention). The plan is read from PostgreSQL
(EXPLAIN ANALYZE on an analysed table), not timed. Fails before: with the batch given as a JSON array
(estimated at 100 rows), the planner hashed the whole ``workflow_jobs`` table at every settle of a
table of a few thousand rows (every pass of a pool that finished a job)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text

from app.db import transaction
from app.ledger.transitions import executor
from app.sql_text import pyformat
from tests.ledger_helpers import add_job, claim_one, settle, settlement

KEPT = 3000  # finished jobs the table keeps


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out.extend(_nodes(child))
    return out


def _running_among_kept(db) -> list[dict[str, Any]]:
    """Two running jobs in a table that keeps KEPT finished ones (analysed)."""
    with transaction(db) as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, payload, status, run_at, max_attempts, execution_timeout_ms, "
                "finished_at, operation_key, trace_id) SELECT 'delay_wake', 'workflow-ledger', '{}', 'succeeded', "
                "now(), 5, 60000, now(), 'kept-' || g, 't' FROM generate_series(1, :n) g"
            ),
            {"n": KEPT},
        )
    running = []
    for _ in range(2):
        add_job(db)
        running.append(claim_one(db))
    with db.connect() as conn:
        conn.execute(text("ANALYZE workflow_jobs"))
    return running


def _jobs_read(db, sql: str, params: dict[str, Any]) -> int:
    """The most rows of ``workflow_jobs`` one scan of ``sql`` read (EXPLAIN ANALYZE, rolled back)."""
    with db.connect() as conn, conn.begin():
        raw = conn.connection.driver_connection.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + pyformat(sql), params
        ).fetchone()[0]
        conn.rollback()
    plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    scans = [n for n in _nodes(plan) if n.get("Relation Name") == "workflow_jobs"]
    assert scans, plan
    return max(n["Actual Rows"] * n["Actual Loops"] for n in scans)


def test_a_settle_reads_the_settled_jobs_by_key_not_the_table(db):
    running = _running_among_kept(db)
    items = [settlement(r, "succeeded", result={"ok": True}) for r in running]
    assert _jobs_read(db, executor._SETTLE.text, executor._settle_params(items, 30.0, 900.0)) <= len(items)
    assert settle(db, items) == {r["id"]: "succeeded" for r in running}  # and it still settles them


def test_a_lease_renewal_reads_the_renewed_jobs_by_key_not_the_table(db):
    running = _running_among_kept(db)
    params = {
        "ids": [r["id"] for r in running],
        "gens": [r["generation"] for r in running],
        "tokens": [str(r["lease_token"]) for r in running],
        "lease_seconds": 60.0,
    }
    assert _jobs_read(db, executor._RENEW.text, params) <= len(running)
