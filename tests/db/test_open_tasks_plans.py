"""An instance's open tasks are read through the instance's index, whatever the statistics say
(``app.engine.row_access._OPEN_WORK``). Written as ``state IN ('PENDING', 'CLAIMED')`` they matched the
predicate of the claim's partial index, and a plan made while that index was small (statistics taken with no
backlog, then kept by a prepared statement) read the whole index, every open task of every namespace, to
find one instance's: in the bench, ``instance_open_work`` read ~95 buffers per workflow end, and at a backlog
of a million tasks it would read a million entries.

Each statement is planned here as a prepared statement's generic plan is, on statistics taken when no task
was open, then run against a backlog of 3,000 open tasks of other instances."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from psycopg import sql

from app.engine import quotas, recovery, row_access, task_protocol
from app.engine.handlers import task_timeouts
from app.engine.transitions import task_moves
from app.integrations import time_skip
from app.sql import Query
from tests.sql_catalog import as_sent, param_names

BACKLOG = 3000
MINE = "ns-open-i1"

# each statement with its parameters (by name), asking about instance MINE; numbers that fit a smallint, so
# that any statement psycopg prepared earlier on the connection with the same text (its parameter types
# picked by the values it had then) takes them
STATEMENTS: list[tuple[Query, dict[str, Any]]] = [
    (row_access._OPEN_WORK, {"i": MINE}),
    (task_protocol._TASK_OVERDUE_IDS, {"i": MINE, "before": None}),
    (task_moves._Q_TASK_POSTPONE_DEADLINES, {"i": MINE, "by": "1 hour"}),
    (task_timeouts._NEXT_DUE, {"i": MINE}),
    (time_skip.MOVE_TASKS, {"ids": [MINE], "s": 7200}),
    # an operator's RETRY_STEP (every task of the backlog has activation 'a': the activation alone read them all)
    (recovery._RECOVERY_TASKS_DEADLINE_CAP, {"i": MINE, "a": "a", "d": datetime(2100, 1, 1, tzinfo=UTC)}),
    (recovery._RECOVERY_WAKES_RUN_AT_CAP, {"i": MINE, "a": "a", "cap": datetime(2100, 1, 1, tzinfo=UTC)}),
    (
        quotas._SHARED,
        {
            "ns": "ns-open",
            "own": MINE,
            "known": None,
            "work_limit": 30_000,
            "queue_limit": 30_000,
            "queues": ["q"],
            "instance_limit": 30_000,
            "k": "lf-ns:ns-open",
        },
    ),
]


def _fill(cur) -> None:
    """BACKLOG tasks of their own instances, all COMPLETED when the statistics are taken; then every one
    but one instance's is open again (PENDING), with no statistics taken since. Foreign keys are not
    checked (``session_replication_role``); all of it in the caller's transaction, rolled back."""
    cur.execute("SET LOCAL session_replication_role = replica")
    cur.execute(
        """
INSERT INTO workflow_instances (id, namespace_id, definition_id, definition_version_id, version, state,
    revision, paused, control_revision, input, queues, deadline_at, trace_id, created_at, updated_at)
SELECT 'ns-open-i' || g, 'ns-open', 'd', 'dv', 'v1', 'RUNNING', 1, false, 1, '{}', '{}',
    now() + interval '1 hour', 't', now(), now()
FROM generate_series(1, %(n)s) g""",
        {"n": BACKLOG},
    )
    cur.execute(
        """
INSERT INTO workflow_tasks (id, namespace_id, instance_id, step_id, step_key, activation_id, queue, state,
    epoch, attempt, deadline_at, created_at, updated_at, purpose, instance_created_at)
SELECT 'ns-open-t' || g, 'ns-open', 'ns-open-i' || g, 's', 'k', 'a', 'q', 'COMPLETED', 1, 1,
    now() + interval '1 hour', now(), now(), 'STEP', now()
FROM generate_series(1, %(n)s) g""",
        {"n": BACKLOG},
    )
    cur.execute("ANALYZE workflow_tasks")
    cur.execute("ANALYZE workflow_instances")
    cur.execute("UPDATE workflow_tasks SET state = 'PENDING' WHERE instance_id <> %(mine)s", {"mine": MINE})


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _generic_plan(cur, q: Query, params: dict[str, Any]) -> dict[str, Any]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of ``q``'s generic plan (what a prepared statement runs on): ``q`` is
    prepared by psycopg as the program prepares it (its parameters typed by their values), then explained
    through its server-side name."""
    cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    cur.execute(q.sql, params, prepare=True)
    cur.execute("SELECT name FROM pg_prepared_statements WHERE statement = %s", [as_sent(q)])
    name = cur.fetchone()[0]
    names = param_names(q)
    args = sql.SQL(", ").join(sql.Literal(params[n]) for n in names)  # coerced to the prepared types
    cur.execute(
        sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {}({})").format(sql.Identifier(name), args)
    )
    doc = cur.fetchone()[0]
    return (doc if isinstance(doc, list) else json.loads(doc))[0]["Plan"]


def test_an_instances_open_tasks_are_read_by_its_index(engine):
    with engine.connect() as conn:
        cur = conn.connection.driver_connection.cursor()
        try:
            _fill(cur)
            for q, params in STATEMENTS:
                name = q.name
                plan = _generic_plan(cur, q, params)
                nodes = list(_nodes(plan))
                tasks = [
                    n
                    for n in nodes
                    if n.get("Relation Name") == "workflow_tasks" and n["Node Type"] != "ModifyTable"
                ]
                used = {n["Index Name"] for n in nodes if "Index Name" in n}
                assert "ix_workflow_tasks_instance" in used, (name, used)
                assert not [n for n in tasks if n["Node Type"] == "Seq Scan"], (name, plan)
                by_instance = [n for n in tasks if "instance_id" in n.get("Filter", "")]
                assert not by_instance, (name, by_instance)  # no index read whole, filtered by instance
                if q is quotas._SHARED:
                    continue  # it counts the namespace's open tasks on purpose (bounded): its own are above
                assert "ix_workflow_tasks_claim" not in used, (name, used)
                read = sum(n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0) for n in tasks)
                assert read <= 2, (name, read)  # the instance's one task, not the backlog
        finally:
            conn.rollback()  # nothing of it stays


def test_the_instances_pending_watch_is_read_by_its_index(engine):
    """``instance_lock_job_fence`` answers when the instance's pending watch is due (``watch_in``): planned
    as a prepared statement's generic plan on statistics taken when no watch was pending, then run against
    BACKLOG pending watches of other instances, it reads the instance's own jobs by
    ``ix_workflow_jobs_instance``, not the status or claim indexes of every instance's jobs; and the job's
    fence (``JOB_FENCE_SQL``) reads its job by primary key (on these statistics, which saw no running job,
    it read every running job through ``ix_workflow_jobs_status_type`` before)."""
    with engine.connect() as conn:
        cur = conn.connection.driver_connection.cursor()
        try:
            _fill(cur)
            cur.execute(
                """
INSERT INTO workflow_jobs (id, type, queue, status, instance_id, run_at, max_attempts, operation_key, trace_id)
SELECT -g, 'task_timeout', 'workflow-ledger', 'succeeded', 'ns-open-i' || g, now() + interval '1 hour', 3,
    'op' || g, 't'
FROM generate_series(1, %(n)s) g""",
                {"n": BACKLOG},
            )
            cur.execute("ANALYZE workflow_jobs")
            cur.execute("UPDATE workflow_jobs SET status = 'pending' WHERE id < 0")
            params = {"id": MINE, "job_id": -1, "gen": 1, "token": None}
            plan = _generic_plan(cur, row_access._LOCK_FENCING, params)
            nodes = list(_nodes(plan))
            jobs = [n for n in nodes if n.get("Relation Name") == "workflow_jobs"]
            used = {n["Index Name"] for n in jobs if "Index Name" in n}
            # the watch by the instance's index; the fence's job by its key or the instance's index (one
            # instance's jobs), not ix_workflow_jobs_status_type (every running job)
            assert "ix_workflow_jobs_instance" in used and used <= {
                "ix_workflow_jobs_instance",
                "workflow_jobs_pkey",
            }, [(n["Node Type"], n.get("Index Name"), n.get("Index Cond")) for n in jobs]
            assert not [n for n in jobs if n["Node Type"] == "Seq Scan"], plan
            read = sum(n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0) for n in jobs)
            assert read <= 2, read  # the instance's own watch (and the fence's job), not the backlog
            # an operator's RETRY_STEP caps the instance's pending wakes: its own jobs, not every pending one
            cap = {"i": MINE, "a": "a", "cap": datetime(2100, 1, 1, tzinfo=UTC)}
            plan = _generic_plan(cur, recovery._RECOVERY_WAKES_RUN_AT_CAP, cap)
            jobs = [n for n in _nodes(plan) if n.get("Relation Name") == "workflow_jobs"]
            scans = [(n["Node Type"], n.get("Index Name")) for n in jobs if n["Node Type"] != "ModifyTable"]
            assert scans and all(i == "ix_workflow_jobs_instance" for _, i in scans), scans
            read = sum(n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0) for n in jobs)
            assert read <= 2, read
        finally:
            conn.rollback()
