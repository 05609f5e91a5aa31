"""Enqueue a parent job inside the caller's transaction (L-CLAIM-4, L-EFFECT-2)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from app.db import after_commit, tx
from app.ids import new_id
from app.ledger.hints import publish_after_commit, worth_a_hint
from app.ledger.states import DEFAULT_MAX_ATTEMPTS, JobType
from app.observability import metrics, tracing
from app.settings import get_settings
from app.sql import query, run


@dataclass(frozen=True)
class EnqueuedJob:
    id: int
    created: bool  # False when the idempotency key already named a job


def operation_key_for(job_type: str, payload: Any, links: tuple[Any, ...] = ()) -> str:
    """A stable identity of the side-effect operation: same input, same key (L-CLAIM table)."""
    doc = json.dumps([job_type, payload, list(links)], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:32]


# A job whose id nobody reads (a key that exists leaves its job as it is).
_INSERT_LATER = """
INSERT INTO workflow_jobs (type, queue, payload, instance_id, task_id, step_key, priority, run_at,
    max_attempts, execution_timeout_ms, operation_key, idempotency_key, trace_id, traceparent)
VALUES (:type, :queue, CAST(:payload AS jsonb), :instance_id, :task_id, :step_key, :priority,
    COALESCE(CAST(:run_at AS timestamptz), now() + CAST(:delay_ms AS double precision) * interval '1 millisecond'),
    :max_attempts, :execution_timeout_ms, :operation_key, :idempotency_key, :trace_id, :traceparent)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
"""
JOB_INSERT_UNREAD = query("job_insert_unread", _INSERT_LATER)
JOB_INSERT = query("job_insert", _INSERT_LATER + "RETURNING id")
JOB_BY_KEY = query("job_by_key", "SELECT id FROM workflow_jobs WHERE idempotency_key = :key")


def enqueue(
    conn: Connection,
    job_type: str | JobType,
    payload: Any = None,
    *,
    instance_id: str | None = None,
    task_id: str | None = None,
    step_key: str | None = None,
    priority: int = 0,
    run_at: datetime | None = None,
    delay_ms: float = 0,
    max_attempts: int | None = None,
    execution_timeout_ms: int | None = None,
    idempotency_key: str | None = None,
    operation_key: str | None = None,
    trace_id: str | None = None,
    traceparent: str | None = None,
    later: bool = False,
    into: list[dict[str, Any]] | None = None,
) -> EnqueuedJob:
    """Insert a pending job in ``conn``'s transaction; its wake hint goes out after commit.

    A second enqueue with the same ``idempotency_key`` returns the existing job (the unique index
    arbitrates; if the first inserter rolls back, the waiting second insert proceeds).

    ``later``: the caller needs neither the job's id nor whether it was created (``job_insert_unread``);
    the answer is then ``EnqueuedJob(id=0, created=True)`` (an existing key is left as it is all the
    same). ``into`` (with ``later``): the job's row is not inserted here but appended to ``into``, for a
    statement of the caller's that inserts it with its own write (``step_moves.activate``).

    ``traceparent`` (W3C) defaults to the current span when tracing is on, so the job's attempts
    join the trace of whatever enqueued it (app/observability/tracing.py)."""
    jt = JobType(job_type)
    if priority < -32768 or priority > 32767:
        raise ValueError("priority must fit in a smallint range")
    body = {} if payload is None else payload
    params = {
        "type": jt.value,
        "queue": jt.pool.queue,
        "payload": json.dumps(body),
        "instance_id": instance_id,
        "task_id": task_id,
        "step_key": step_key,
        "priority": priority,
        "run_at": run_at,
        "delay_ms": delay_ms,
        "max_attempts": max_attempts or DEFAULT_MAX_ATTEMPTS[jt],
        "execution_timeout_ms": execution_timeout_ms or _default_timeout_ms(),
        "operation_key": operation_key or operation_key_for(jt.value, body, (instance_id, task_id, step_key)),
        "idempotency_key": idempotency_key,
        "trace_id": trace_id or new_id(),
        "traceparent": traceparent or (tracing.current_traceparent() if tracing.ENABLED else None),
    }
    # a job due beyond two short polls is found by the pools' own passes in time (hints.worth_a_hint)
    hinted = run_at is not None or worth_a_hint(delay_ms)
    if later:
        if into is not None:
            into.append(params)
        else:
            run(conn, JOB_INSERT_UNREAD, params)
        _enqueued(conn, jt, hinted)
        return EnqueuedJob(id=0, created=True)
    row = run(conn, JOB_INSERT, params).first()
    if row is None:  # the key exists (its inserter committed)
        existing = run(conn, JOB_BY_KEY, {"key": idempotency_key}).scalar_one()
        return EnqueuedJob(id=existing, created=False)
    _enqueued(conn, jt, hinted)
    return EnqueuedJob(id=row.id, created=True)


# One pending (or paused) job of a type per instance, due no later than :delay_ms from now: inserted when
# there is none, moved earlier when it is due later (a paused one keeps the smaller remainder). The caller
# holds the instance's lock, so two arms of one instance never race. Its rows: the job it inserted or
# moved (none when it left the job as it was).
JOB_ARM = query(
    "job_arm",
    """
WITH cur AS (
    SELECT id, status, run_at, remaining_ms FROM workflow_jobs
    WHERE instance_id = :instance_id AND type = :type AND status IN ('pending', 'paused')
    ORDER BY run_at, id LIMIT 1 FOR UPDATE),
moved AS (
    UPDATE workflow_jobs j SET
        run_at = CASE WHEN cur.status = 'pending' THEN now() + CAST(:delay_ms AS float8) * interval '1 millisecond'
                      ELSE j.run_at END,
        remaining_ms = CASE WHEN cur.status = 'paused' THEN CAST(:delay_ms AS bigint) ELSE j.remaining_ms END,
        updated_at = now()
    FROM cur WHERE j.id = cur.id
      AND ((cur.status = 'pending' AND cur.run_at > now() + CAST(:delay_ms AS float8) * interval '1 millisecond')
           OR (cur.status = 'paused' AND cur.remaining_ms > CAST(:delay_ms AS float8)))
    RETURNING j.id),
created AS (
    INSERT INTO workflow_jobs (type, queue, payload, instance_id, priority, run_at, max_attempts,
        execution_timeout_ms, operation_key, trace_id, traceparent)
    SELECT CAST(:type AS workflow_job_type), CAST(:queue AS workflow_job_queue), CAST(:payload AS jsonb),
        :instance_id, 0, now() + CAST(:delay_ms AS float8) * interval '1 millisecond', :max_attempts,
        :execution_timeout_ms, :operation_key, :trace_id, :traceparent
    WHERE NOT EXISTS (SELECT 1 FROM cur)
    RETURNING id)
SELECT id FROM moved UNION ALL SELECT id FROM created
""",
)


def arm(
    conn: Connection,
    job_type: str | JobType,
    payload: Any,
    *,
    instance_id: str,
    delay_ms: float,
    trace_id: str,
    absent: bool = False,
    into: list[dict[str, Any]] | None = None,
) -> None:
    """A timer of ``instance_id``: its one pending job of ``job_type`` is due no later than ``delay_ms`` from
    now (created, moved earlier, or left as it is), with the transaction's next statement. For timers that
    cover many rows of an instance, e.g. its deadline and the deadlines of its open tasks (the engine's
    watch, ``task_timeout``): one job per instance instead of one created and canceled per row. The caller holds the instance's lock.
    ``absent``: the caller knows the instance has no such job (it inserted the instance in this
    transaction): the job is a plain insert (``job_insert_unread``), or a row appended to ``into`` (see
    ``enqueue``)."""
    jt = JobType(job_type)
    body = {} if payload is None else payload
    params = {
        "type": jt.value,
        "queue": jt.pool.queue,
        "payload": json.dumps(body),
        "instance_id": instance_id,
        "delay_ms": float(delay_ms),
        "max_attempts": DEFAULT_MAX_ATTEMPTS[jt],
        "execution_timeout_ms": _default_timeout_ms(),
        # each job this arms is an operation of its own (its effect receipts are its own)
        "operation_key": new_id(),
        "trace_id": trace_id,
        "traceparent": tracing.current_traceparent() if tracing.ENABLED else None,
    }
    # a job due beyond two short polls is found by the pools' own passes in time (hints.worth_a_hint)
    hinted = worth_a_hint(delay_ms)
    if absent:
        none = dict.fromkeys(("task_id", "step_key", "run_at", "idempotency_key"))
        row = {**params, **none, "priority": 0}
        if into is not None:
            into.append(row)
        else:
            run(conn, JOB_INSERT_UNREAD, row)
        _enqueued(conn, jt, hinted)
        return
    moved = run(conn, JOB_ARM, params).first()
    # L-CLAIM-4: the job this created (or moved earlier) publishes its hint after the commit; a job left as
    # it was is not news (the watch re-armed at each step of a workflow for a later deadline)
    if moved is not None and hinted:
        publish_after_commit(conn, [jt.pool.queue])


def _enqueued(conn: Connection, jt: JobType, hinted: bool) -> None:
    if hinted:
        publish_after_commit(conn, [jt.pool.queue])
    if metrics.ENABLED:
        _count_after_commit(conn, jt.value, jt.pool.value)


def _count_after_commit(conn: Connection, job_type: str, pool: str) -> None:
    """Count the job in ``ledgerflow_jobs_enqueued_total`` once its transaction commits (one hook per
    transaction however many jobs it enqueues; a rollback counts nothing)."""
    t = tx(conn)
    counts = t.enqueued_counts
    if counts is None:
        counts = t.enqueued_counts = {}
        after_commit(conn, lambda: metrics.jobs_enqueued(counts))
    key = (job_type, pool)
    counts[key] = counts.get(key, 0) + 1


def _default_timeout_ms() -> int:
    return get_settings().execution_timeout_ms
