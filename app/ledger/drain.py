"""System task ``workflow-jobs-drain`` (L-PAUSE-5): reclaim expired leases and passed deadlines,
re-publish wake hints for due jobs. Never runs handlers. One runner at a time (advisory lock)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine

from app import idempotency
from app.db import transaction
from app.ledger import transitions
from app.ledger.hints import publish_now
from app.ledger.models import JOB_QUEUE_TYPE
from app.observability import metrics
from app.settings import Settings
from app.sql import query, run

log = logging.getLogger(__name__)

DRAIN_LOCK_KEY = 7426002
_DUE_QUEUES = query(
    "drain_due_queues",
    f"""
SELECT CAST(q.queue AS text) AS queue FROM unnest(enum_range(NULL::{JOB_QUEUE_TYPE})) AS q(queue)
WHERE EXISTS (SELECT 1 FROM workflow_jobs j
              WHERE j.queue = q.queue AND j.status = 'pending' AND j.run_at <= now())
""",
)


@dataclass
class DrainReport:
    ran: bool
    reclaimed: list[dict] = field(default_factory=list)
    hinted_queues: list[str] = field(default_factory=list)
    # rows changed by each extra sweep (e.g. the engine's expired task leases), by sweep name
    swept: dict[str, int] = field(default_factory=dict)

    @property
    def to_pending(self) -> int:
        return sum(1 for r in self.reclaimed if r["status"] == "pending")

    @property
    def to_dead(self) -> int:
        return sum(1 for r in self.reclaimed if r["status"] == "dead")


# An extra maintenance sweep run by the drain: ``fn(conn, limit) -> rows changed``, in its own short
# transaction under the drain's advisory lock. Layers above the ledger (the engine) pass theirs in.
Sweep = tuple[str, Callable[[Connection, int], int]]


@dataclass(frozen=True)
class Paced:
    """A sweep function whose batches the drain spaces out: after each batch that changed rows it waits
    ``factor`` times as long as that batch's transaction took, outside any transaction (retention's row
    deletes, ``LEDGERFLOW_RETENTION_PAUSE``). A long removal then takes at most ``1 / (1 + factor)`` of a
    PostgreSQL core's time, whatever the batch costs on this server: on a small server the claims and
    settles that share its cores wait less for one (``bench.retention``). Its transactions commit without
    waiting for their WAL to reach the disk (``synchronous_commit = off``): a batch that a crash loses is
    removed again by the next drain, and the drain does not wait on the flush of megabytes of WAL per
    batch."""

    fn: Callable[[Connection, int], int]
    factor: float

    def __call__(self, conn: Connection, limit: int) -> int:
        return self.fn(conn, limit)


def drain(
    engine: Engine, settings: Settings, *, max_passes: int = 10, sweeps: Sequence[Sweep] = ()
) -> DrainReport:
    """One drain run: bounded passes of ``settings.drain_batch`` reclaims, then the extra
    ``sweeps`` (bounded the same way), then hints."""
    started = time.monotonic()
    # expired Idempotency-Key receipts are pruned on every run (W-API-2: their documented lifetime)
    sweeps = (*sweeps, ("idempotency_receipts", idempotency.prune_sweep))
    report = _drain(engine, settings, max_passes=max_passes, sweeps=sweeps)
    metrics.drain_run(report.ran, time.monotonic() - started, report.to_pending, report.to_dead)
    metrics.lease_reclaimed("pending", report.to_pending)
    metrics.lease_reclaimed("dead", report.to_dead)
    return report


_DRAIN_TRY_LOCK = query(
    "drain_try_lock",
    "SELECT pg_try_advisory_xact_lock(:k)",
)
_ASYNC_COMMIT = query("drain_paced_async_commit", "SET LOCAL synchronous_commit = off")


def _drain(engine: Engine, settings: Settings, *, max_passes: int, sweeps: Sequence[Sweep]) -> DrainReport:
    report = DrainReport(ran=False)
    for _ in range(max_passes):
        with transaction(engine) as conn:
            if not run(conn, _DRAIN_TRY_LOCK, {"k": DRAIN_LOCK_KEY}).scalar():
                log.info("drain: another runner holds the lock; skipping")
                return report
            report.ran = True
            batch = transitions.reclaim_expired(
                conn,
                limit=settings.drain_batch,
                backoff_base=settings.backoff_base_seconds,
                backoff_cap=settings.backoff_cap_seconds,
            )
        report.reclaimed.extend(batch)
        if len(batch) < settings.drain_batch:
            break
    for name, sweep in sweeps if report.ran else ():
        for _ in range(max_passes):
            began = time.monotonic()
            with transaction(engine) as conn:
                if not run(conn, _DRAIN_TRY_LOCK, {"k": DRAIN_LOCK_KEY}).scalar():
                    break
                if isinstance(sweep, Paced):
                    run(conn, _ASYNC_COMMIT)
                n = sweep(conn, settings.drain_batch)
            report.swept[name] = report.swept.get(name, 0) + n
            if n and isinstance(sweep, Paced) and sweep.factor > 0:
                time.sleep((time.monotonic() - began) * sweep.factor)
            if n < settings.drain_batch:
                break
    with engine.connect() as conn:
        report.hinted_queues = [r.queue for r in run(conn, _DUE_QUEUES)]
    for queue in report.hinted_queues:
        publish_now(queue)
    if report.reclaimed:
        log.warning(
            "drain: reclaimed %d job(s): %d back to pending, %d dead",
            len(report.reclaimed),
            report.to_pending,
            report.to_dead,
        )
    for name, n in report.swept.items():
        if n:
            log.info("drain: sweep %s changed %d row(s)", name, n)
    return report
