"""The runtime status panel (SPEC L-STATUS): the ledger and pools as a whole, independent of any
list filter, every time comparison by database time (L-CLAIM-6)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

LEDGER_QUEUES = ["workflow-ledger", "workflow-ledger-outbound"]

# Nodes considered: heartbeat in the last 10 min, worker role, registered ledger pools.
# "live" = active with a heartbeat within 90 s; slots count only live nodes.
_WORKERS = text(
    """
SELECT count(*) FILTER (WHERE status = 'active' AND heartbeat_at >= now() - interval '90 seconds') AS live,
       count(*) AS total,
       COALESCE(sum(slots_in_use) FILTER (
           WHERE status = 'active' AND heartbeat_at >= now() - interval '90 seconds'), 0) AS slots_in_use,
       COALESCE(sum(slot_capacity) FILTER (
           WHERE status = 'active' AND heartbeat_at >= now() - interval '90 seconds'), 0) AS slot_capacity
FROM workflow_worker_nodes
WHERE heartbeat_at >= now() - interval '10 minutes'
  AND 'worker' = ANY(roles)
  AND pools && CAST(:queues AS text[])
"""
)

_JOBS = text(
    """
SELECT count(*) FILTER (WHERE status = 'running') AS in_flight,
       count(*) FILTER (WHERE status = 'running' AND (lease_until IS NULL OR lease_until <= now()
                        OR (execution_deadline IS NOT NULL AND execution_deadline <= now()))) AS stuck,
       count(*) FILTER (WHERE status = 'pending' AND run_at <= now()) AS backlog,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= now()))
           AS oldest_queued_seconds,
       -- dead letters: an index-only count of (status, type) (no heap visit for visible pages)
       (SELECT count(*) FROM workflow_jobs d WHERE d.status = 'dead') AS dead,
       now() AS db_now
FROM workflow_jobs
-- only the live statuses are read row by row: finished history (the bulk of a long-running ledger)
-- is never read, so the panel's cost follows the live work and the dead letters, not the history
WHERE status IN ('running', 'pending')
"""
)

_ATTEMPTS = text(
    """
SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - due_at))
           FILTER (WHERE started_at >= now() - interval '1 hour') AS p95,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - due_at))
           FILTER (WHERE started_at >= now() - interval '1 hour') AS p99,
       count(*) FILTER (WHERE started_at >= now() - interval '1 hour') AS attempts_1h,
       count(*) FILTER (WHERE started_at >= now() - interval '1 hour' AND status = 'failed') AS failed_1h,
       avg(duration_ms) FILTER (WHERE started_at >= now() - interval '1 hour' AND duration_ms IS NOT NULL)
           AS avg_duration_ms,
       count(*) FILTER (WHERE started_at >= now() - interval '1 hour' AND duration_ms IS NOT NULL)
           AS duration_samples_1h
FROM workflow_job_executions
WHERE started_at >= now() - interval '1 hour'
"""
)
_LAST_CLAIM = text("SELECT max(started_at) FROM workflow_job_executions")


def _num(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


def runtime_status(conn: Connection) -> dict[str, Any]:
    w = conn.execute(_WORKERS, {"queues": LEDGER_QUEUES}).one()
    j = conn.execute(_JOBS).one()
    a = conn.execute(_ATTEMPTS).one()
    last_claim = conn.execute(_LAST_CLAIM).scalar()
    attempts_1h = int(a.attempts_1h)
    failed_1h = int(a.failed_1h)
    return {
        "db_time": j.db_now,
        "live_workers": {"live": int(w.live), "total": int(w.total)},
        "slots": {"in_use": int(w.slots_in_use), "capacity": int(w.slot_capacity)},
        "in_flight": int(j.in_flight),
        "stuck": int(j.stuck),
        "backlog": int(j.backlog),
        "oldest_queued_seconds": _num(j.oldest_queued_seconds),
        "queue_wait_p95_seconds": _num(a.p95),
        "queue_wait_p99_seconds": _num(a.p99),
        "dead": int(j.dead),
        "last_claim_at": last_claim,
        "failure_rate_1h": round(failed_1h / attempts_1h, 4) if attempts_1h else 0.0,
        "attempts_1h": attempts_1h,
        "failed_attempts_1h": failed_1h,
        "avg_duration_ms_1h": _num(a.avg_duration_ms),
        "duration_samples_1h": int(a.duration_samples_1h),
    }


# --------------------------------------------------------------------------- the last hour per pool
SERIES_BUCKET_SECONDS = 300
_SERIES = text(
    """
SELECT j.queue,
       floor(extract(epoch FROM e.started_at - (now() - interval '1 hour')) / :bucket)::int AS slot,
       count(*) AS attempts,
       count(*) FILTER (WHERE e.status = 'failed') AS failed,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM e.started_at - e.due_at)) AS p95,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM e.started_at - e.due_at)) AS p99
FROM workflow_job_executions e JOIN workflow_jobs j ON j.id = e.job_id
WHERE e.started_at >= now() - interval '1 hour'
GROUP BY 1, 2
"""
)


def hour_series(conn: Connection) -> dict[str, Any]:
    """Attempts, failures and queue-wait P95/P99 of the last hour per pool, in 5-minute buckets
    (oldest first; a bucket without attempts has zeros and no percentiles)."""
    slots = 3600 // SERIES_BUCKET_SECONDS
    pools: dict[str, list[dict[str, Any]]] = {
        q: [{"attempts": 0, "failed": 0, "p95": None, "p99": None} for _ in range(slots)]
        for q in LEDGER_QUEUES
    }
    for r in conn.execute(_SERIES, {"bucket": SERIES_BUCKET_SECONDS}):
        series = pools.setdefault(
            r.queue, [{"attempts": 0, "failed": 0, "p95": None, "p99": None} for _ in range(slots)]
        )
        slot = min(max(int(r.slot), 0), slots - 1)
        series[slot] = {
            "attempts": int(r.attempts),
            "failed": int(r.failed),
            "p95": _num(r.p95),
            "p99": _num(r.p99),
        }
    return {"bucket_seconds": SERIES_BUCKET_SECONDS, "pools": pools}


# --------------------------------------------------------------------------- what a drain would do
_STUCK = text(
    """
SELECT id, type, queue, generation, attempts, max_attempts, lease_until, execution_deadline,
       (execution_deadline IS NOT NULL AND execution_deadline <= now()) AS past_deadline
FROM workflow_jobs
WHERE status = 'running' AND (lease_until IS NULL OR lease_until <= now()
      OR (execution_deadline IS NOT NULL AND execution_deadline <= now()))
ORDER BY id
LIMIT :limit
"""
)
_DUE = text(
    """
SELECT queue, count(*) AS due FROM workflow_jobs
WHERE status = 'pending' AND run_at <= now() AND queue = ANY(CAST(:queues AS text[]))
GROUP BY queue
"""
)


def drain_preview(conn: Connection, *, sample: int = 50) -> dict[str, Any]:
    """What running the drain now would change (read only): the running jobs whose lease expired or
    whose deadline passed (a sample of ``sample`` and the counts), and the due jobs per pool whose
    queues would get a wake hint."""
    j = conn.execute(_JOBS).one()
    rows = [dict(r._mapping) for r in conn.execute(_STUCK, {"limit": sample})]
    for r in rows:
        r["id"] = str(r["id"])
    due = {r.queue: int(r.due) for r in conn.execute(_DUE, {"queues": LEDGER_QUEUES})}
    return {"stuck": int(j.stuck), "stuck_sample": rows, "due_by_queue": due, "db_time": j.db_now}
