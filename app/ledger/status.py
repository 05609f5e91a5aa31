"""The runtime status panel (SPEC L-STATUS): the ledger and pools as a whole, independent of any
list filter, every time comparison by database time (L-CLAIM-6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from app.ledger import histogram, rollup
from app.ledger.models import JOB_QUEUE_TYPE, QUEUES
from app.sql import query, run

LEDGER_QUEUES = QUEUES

# Nodes considered: heartbeat in the last 10 min, worker role, registered ledger pools.
# "live" = active with a heartbeat within 90 s; slots count only live nodes.
_WORKERS = query(
    "status_workers",
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
""",
)

_JOBS = query(
    "status_jobs",
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
""",
)

# The last hour's attempt figures (L-STATUS) come from the rollup's minutes plus a live read of the
# attempts not rolled yet (app/ledger/rollup.py). Without a rolled minute in the hour the live read is
# the whole hour and the percentiles are exact (percentile_cont); with rolled minutes they are read
# from the merged log-bucket histograms (app/ledger/histogram.py: never under, at most 9.05 % + 1 ms
# over). Counts, failures and the average duration are exact either way.
_LIVE_EXACT = query(
    "status_live_exact",
    f"""
SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM e.started_at - e.due_at)) AS p95,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM e.started_at - e.due_at)) AS p99,
       count(*) AS attempts,
       count(*) FILTER (WHERE e.status = 'failed') AS failed,
       COALESCE(sum(e.duration_ms), 0) AS duration_sum_ms,
       count(e.duration_ms) AS duration_n
FROM ({rollup.LIVE_ATTEMPTS}) e
""",
)
_LIVE_BUCKETS = query(
    "status_live_buckets",
    f"""
SELECT {rollup.WAIT_BUCKET} AS bucket,
       count(*) AS attempts,
       count(*) FILTER (WHERE e.status = 'failed') AS failed,
       COALESCE(sum(e.duration_ms), 0) AS duration_sum_ms,
       count(e.duration_ms) AS duration_n
FROM ({rollup.LIVE_ATTEMPTS}) e
GROUP BY 1
""",
)
# max(started_at) is one step of a backward scan of the started_at index; the open attempts are on the
# running jobs' rows
_LAST_CLAIM = query(
    "status_last_claim",
    "SELECT greatest((SELECT max(started_at) FROM workflow_job_executions), "
    "(SELECT max(attempt_started_at) FROM workflow_jobs WHERE status = 'running'))",
)


def _num(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else _num(ms / 1000)


@dataclass
class _Hour:
    """Attempt figures of (part of) the last hour."""

    attempts: int = 0
    failed: int = 0
    duration_sum_ms: int = 0
    duration_n: int = 0
    p95: float | None = None
    p99: float | None = None


def _last_hour(conn: Connection) -> _Hour:
    """The hour's figures: exact from the live attempts while no minute of it is rolled, else the
    rolled minutes plus the live head and tail by histogram bucket."""
    win = rollup.window(conn)
    params = win.live_params()
    if not win.rolled:
        r = run(conn, _LIVE_EXACT, params).one()
        return _Hour(int(r.attempts), int(r.failed), int(r.duration_sum_ms), int(r.duration_n), r.p95, r.p99)
    minutes = rollup.rolled_minutes(conn, win)
    live = run(conn, _LIVE_BUCKETS, params).all()
    rows = [*minutes, *live]
    hist = histogram.add_counts(
        histogram.merge(m.wait_hist for m in minutes), ((r.bucket, int(r.attempts)) for r in live)
    )
    p95, p99 = histogram.percentile(hist, 0.95), histogram.percentile(hist, 0.99)
    return _Hour(
        attempts=sum(int(r.attempts) for r in rows),
        failed=sum(int(r.failed) for r in rows),
        duration_sum_ms=sum(int(r.duration_sum_ms) for r in rows),
        duration_n=sum(int(r.duration_n) for r in rows),
        p95=None if p95 is None else p95 / 1000,
        p99=None if p99 is None else p99 / 1000,
    )


def runtime_status(conn: Connection) -> dict[str, Any]:
    w = run(conn, _WORKERS, {"queues": LEDGER_QUEUES}).one()
    j = run(conn, _JOBS).one()
    hour = _last_hour(conn)
    last_claim = run(conn, _LAST_CLAIM).scalar()
    return {
        "db_time": j.db_now,
        "live_workers": {"live": int(w.live), "total": int(w.total)},
        "slots": {"in_use": int(w.slots_in_use), "capacity": int(w.slot_capacity)},
        "in_flight": int(j.in_flight),
        "stuck": int(j.stuck),
        "backlog": int(j.backlog),
        "oldest_queued_seconds": _num(j.oldest_queued_seconds),
        "queue_wait_p95_seconds": _num(hour.p95),
        "queue_wait_p99_seconds": _num(hour.p99),
        "dead": int(j.dead),
        "last_claim_at": last_claim,
        "failure_rate_1h": round(hour.failed / hour.attempts, 4) if hour.attempts else 0.0,
        "attempts_1h": hour.attempts,
        "failed_attempts_1h": hour.failed,
        "avg_duration_ms_1h": _num(hour.duration_sum_ms / hour.duration_n) if hour.duration_n else None,
        "duration_samples_1h": hour.duration_n,
    }


# --------------------------------------------------------------------------- the last hour per pool
SERIES_BUCKET_SECONDS = 300
# per pool and 5-minute slot of the live attempts: exact (no rolled minute in the hour) ...
_SERIES_EXACT = query(
    "status_series_exact",
    f"""
SELECT j.queue,
       floor(extract(epoch FROM e.started_at - :since) / :bucket)::int AS slot,
       count(*) AS attempts,
       count(*) FILTER (WHERE e.status = 'failed') AS failed,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM e.started_at - e.due_at)) AS p95,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM e.started_at - e.due_at)) AS p99
FROM ({rollup.LIVE_ATTEMPTS}) e JOIN workflow_jobs j ON j.id = e.job_id
GROUP BY 1, 2
""",
)
# ... or by histogram bucket, merged with the rolled minutes
_SERIES_BUCKETS = query(
    "status_series_buckets",
    f"""
SELECT j.queue,
       floor(extract(epoch FROM e.started_at - :since) / :bucket)::int AS slot,
       {rollup.WAIT_BUCKET} AS wait_bucket,
       count(*) AS attempts,
       count(*) FILTER (WHERE e.status = 'failed') AS failed
FROM ({rollup.LIVE_ATTEMPTS}) e JOIN workflow_jobs j ON j.id = e.job_id
GROUP BY 1, 2, 3
""",
)


def hour_series(conn: Connection) -> dict[str, Any]:
    """Attempts, failures and queue-wait P95/P99 of the last hour per pool, in 5-minute buckets
    (oldest first; a bucket without attempts has zeros and no percentiles). Computed like the
    runtime status (rolled minutes + live attempts); a rolled minute counts in the bucket holding
    its start."""
    slots = 3600 // SERIES_BUCKET_SECONDS
    pools: dict[str, list[dict[str, Any]]] = {q: _empty_series(slots) for q in LEDGER_QUEUES}
    win = rollup.window(conn)
    params = {**win.live_params(), "bucket": SERIES_BUCKET_SECONDS}
    if not win.rolled:
        for r in run(conn, _SERIES_EXACT, params):
            series = pools.setdefault(r.queue, _empty_series(slots))
            series[_clamp(r.slot, slots)] = {
                "attempts": int(r.attempts),
                "failed": int(r.failed),
                "p95": _num(r.p95),
                "p99": _num(r.p99),
            }
        return {"bucket_seconds": SERIES_BUCKET_SECONDS, "pools": pools}
    hists: dict[tuple[str, int], list[int]] = {}
    for m in rollup.rolled_minutes(conn, win):
        slot = _clamp(int((m.minute - win.since).total_seconds() // SERIES_BUCKET_SECONDS), slots)
        _add(pools, hists, slots, m.queue, slot, int(m.attempts), int(m.failed))
        histogram.add_counts(hists[m.queue, slot], enumerate(m.wait_hist))
    for r in run(conn, _SERIES_BUCKETS, params):
        slot = _clamp(r.slot, slots)
        _add(pools, hists, slots, r.queue, slot, int(r.attempts), int(r.failed))
        hists[r.queue, slot][r.wait_bucket] += int(r.attempts)
    for (queue, slot), hist in hists.items():
        pools[queue][slot]["p95"] = _seconds(histogram.percentile(hist, 0.95))
        pools[queue][slot]["p99"] = _seconds(histogram.percentile(hist, 0.99))
    return {"bucket_seconds": SERIES_BUCKET_SECONDS, "pools": pools}


def _empty_series(slots: int) -> list[dict[str, Any]]:
    return [{"attempts": 0, "failed": 0, "p95": None, "p99": None} for _ in range(slots)]


def _clamp(slot: int, slots: int) -> int:
    return min(max(int(slot), 0), slots - 1)


def _add(pools: dict, hists: dict, slots: int, queue: str, slot: int, attempts: int, failed: int) -> None:
    """Add counts to a pool's slot (and make sure it has a histogram)."""
    bucket = pools.setdefault(queue, _empty_series(slots))[slot]
    bucket["attempts"] += attempts
    bucket["failed"] += failed
    hists.setdefault((queue, slot), histogram.empty())


# --------------------------------------------------------------------------- what a drain would do
_STUCK = query(
    "status_stuck",
    """
SELECT id, type, queue, generation, attempts, max_attempts, lease_until, execution_deadline,
       (execution_deadline IS NOT NULL AND execution_deadline <= now()) AS past_deadline
FROM workflow_jobs
WHERE status = 'running' AND (lease_until IS NULL OR lease_until <= now()
      OR (execution_deadline IS NOT NULL AND execution_deadline <= now()))
ORDER BY id
LIMIT :limit
""",
)
_DUE = query(
    "status_due",
    f"""
SELECT queue, count(*) AS due FROM workflow_jobs
WHERE status = 'pending' AND run_at <= now() AND queue = ANY(CAST(:queues AS {JOB_QUEUE_TYPE}[]))
GROUP BY queue
""",
)


def drain_preview(conn: Connection, *, sample: int = 50) -> dict[str, Any]:
    """What running the drain now would change (read only): the running jobs whose lease expired or
    whose deadline passed (a sample of ``sample`` and the counts), and the due jobs per pool whose
    queues would get a wake hint."""
    j = run(conn, _JOBS).one()
    rows = [dict(r._mapping) for r in run(conn, _STUCK, {"limit": sample})]
    for r in rows:
        r["id"] = str(r["id"])
    due = {r.queue: int(r.due) for r in run(conn, _DUE, {"queues": LEDGER_QUEUES})}
    return {"stuck": int(j.stuck), "stuck_sample": rows, "due_by_queue": due, "db_time": j.db_now}
