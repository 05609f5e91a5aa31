"""A pool's pass keeps its work bounded when its prepared plan was made on a tiny table. The pool's
connection prepares the pass once (a generic plan, ``PG_SESSION_SETTINGS``) and keeps that plan until the
next ANALYZE of ``workflow_jobs``: in a new database (every deployment's first minutes, every bench run)
that plan is made while the table holds a row or two. Fails before: the claim's UPDATE joined ``picked``,
both sides were costed at one row, and the plan put the whole table (its primary key, scanned in full) on
the outer side; every pass then read every job the table keeps. The plan is read from PostgreSQL
(EXPLAIN ANALYZE of the prepared statement), not timed."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql as pgsql
from sqlalchemy import Engine

from app.ledger.transitions import executor

KEPT = 5000  # jobs the table holds once the plan is made


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out.extend(_nodes(child))
    return out


@pytest.fixture
def pool_conn(db: Engine) -> Iterator[psycopg.Connection]:
    """A connection set up as a pool's (autocommit, the pool's session settings) whose ``workflow_jobs`` and
    ``workflow_job_executions`` are empty copies of the real ones in a schema of the test's own."""
    schema = "plan_" + uuid.uuid4().hex[:8]
    dsn = db.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        for table in ("workflow_jobs", "workflow_job_executions"):
            admin.execute(f"CREATE TABLE {schema}.{table} (LIKE public.{table} INCLUDING ALL)")
    options = f"{executor.PG_SESSION_OPTIONS} -c search_path={schema},public"
    conn = psycopg.connect(dsn, autocommit=True, options=options)
    try:
        yield conn
    finally:
        conn.close()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _add(conn: psycopg.Connection, n: int, status: str, due: str) -> None:
    conn.execute(
        "INSERT INTO workflow_jobs (type, queue, payload, status, run_at, max_attempts, execution_timeout_ms, "
        "operation_key, trace_id) SELECT 'delay_wake', 'workflow-ledger', '{}', %s::workflow_job_status, now() + %s::interval, 5, "
        "60000, 'op-' || md5(random()::text), 't' FROM generate_series(1, %s)",
        (status, due, n),
    )


def _pass(conn: psycopg.Connection) -> executor.Pass:
    return executor.settle_and_claim(
        conn,
        [],
        queue="workflow-ledger",
        limit=2,
        worker_id="w",
        lease_seconds=30,
        by_due=False,
        backoff_base=1,
        backoff_cap=60,
    )


def test_a_pass_prepared_on_a_tiny_table_reads_only_its_rows_once_the_table_grew(pool_conn):
    conn = pool_conn
    _add(conn, 1, "pending", "-1 s")
    conn.execute("ANALYZE workflow_jobs")  # a new database's first ANALYZE: one row
    assert len(_pass(conn).claimed) == 1  # prepared now (a generic plan: the pool's session settings)
    _add(conn, KEPT, "succeeded", "-1 h")  # the table grows; no ANALYZE since the plan was made
    _add(conn, 2, "pending", "-1 s")
    [(name, statement)] = conn.execute(
        "SELECT name, statement FROM pg_prepared_statements WHERE statement LIKE '%claimed AS (%'"
    ).fetchall()
    sql = executor._pg_settle_and_claim_sql(False, 2)
    assert "LIMIT 2" in statement
    order = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))  # psycopg numbers them by first use
    params = {
        "items": "[]",
        "ids": [],
        "backoff_base": 1.0,
        "backoff_cap": 60.0,
        "unknown": "x",
        "unsafe": "x",
        "queue": "workflow-ledger",
        "lease_seconds": 30.0,
        "worker_id": "w",
    }
    args = pgsql.SQL(", ").join(pgsql.Literal(params[k]) for k in order)  # EXECUTE takes no bound values
    query = pgsql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {}({})").format(pgsql.Identifier(name), args)
    with conn.transaction(force_rollback=True):
        raw = conn.execute(query).fetchone()[0]
    plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    scans = [n for n in _nodes(plan) if n.get("Relation Name") == "workflow_jobs"]
    [claimed] = [n for n in scans if n.get("Subplan Name") == "CTE claimed"]
    assert claimed["Actual Rows"] == 2, plan  # the two due jobs were claimed
    assert max(n["Actual Rows"] * n["Actual Loops"] for n in scans) <= 10, plan
