"""System task ``workflow-jobs-drain`` (L-PAUSE-5): reclaim expired leases and passed deadlines,
re-publish wake hints for due jobs. Never runs handlers. One run at a time: each of its transactions takes
an advisory lock (never waited for), and the run holds a lease across them (``ledger_run_leases``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine

from app import idempotency
from app.db import transaction
from app.ids import new_id
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
# The drain's lock, waited for: by a run that holds the lease (another run's transaction holds the lock only
# for its one look at the lease, or for one batch after this run's lease ran out: a try would end the run at
# such a look), and by the release phase's settling of the history partitions (``app.engine.retention``).
DRAIN_LOCK = query("drain_lock", "SELECT pg_advisory_xact_lock(:k)")
_ASYNC_COMMIT = query("drain_paced_async_commit", "SET LOCAL synchronous_commit = off")

# The run's lease (migration 0039). The advisory lock above keeps two drain transactions from running at
# once; between them (a paced sweep's pause, which can outlast the drain interval) another run of the actor
# could take it, and the two runs' batches would interleave. So a run takes the lease in its first
# transaction and renews it in every later one, and in its pauses every ``RUN_LEASE_RENEW_SECONDS``; a
# run that finds the lease held by another live runner does not start, or stops where it is. A runner
# that died (SIGKILL mid-pause) keeps the others out for at most ``RUN_LEASE_SECONDS``. Taken under the
# advisory lock, so no drain transaction ever waits on the row.
RUN_LEASE = "drain"
RUN_LEASE_SECONDS = 6.0
RUN_LEASE_RENEW_SECONDS = 2.0
_LEASE_TAKE = query(
    "drain_lease_take",
    """
INSERT INTO ledger_run_leases AS l (name, holder, expires_at)
VALUES (:name, :holder, now() + make_interval(secs => :ttl))
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE l.holder = EXCLUDED.holder OR l.expires_at <= now()
RETURNING l.holder""",
)
_LEASE_RELEASE = query(
    "drain_lease_release",
    "UPDATE ledger_run_leases SET expires_at = now() WHERE name = :name AND holder = :holder",
)


@dataclass
class _Run:
    """One drain run's hold on the drain: its lease's holder id, and whether it lost the drain to another
    run (then it stops)."""

    engine: Engine
    holder: str = field(default_factory=new_id)
    lost: bool = False
    taken: bool = False  # the run took the lease (its first hold)

    def hold(self, conn: Connection) -> bool:
        """In a drain transaction: the advisory lock and the lease (taken or renewed). False when the run
        has not taken the lease yet and another run's transaction holds the lock now, or when another live
        run holds the lease. A run that took the lease waits for the lock."""
        if self.taken:
            run(conn, DRAIN_LOCK, {"k": DRAIN_LOCK_KEY})
        elif not run(conn, _DRAIN_TRY_LOCK, {"k": DRAIN_LOCK_KEY}).scalar():
            return False
        params = {"name": RUN_LEASE, "holder": self.holder, "ttl": RUN_LEASE_SECONDS}
        if run(conn, _LEASE_TAKE, params).first() is None:
            self.lost = True
            return False
        self.taken = True
        return True

    def pause(self, seconds: float) -> None:
        """Sleep ``seconds`` outside any transaction, renewing the lease every ``RUN_LEASE_RENEW_SECONDS``;
        stops early when another run took the lease (``lost``)."""
        left = seconds
        while left > 0 and not self.lost:
            step = min(left, RUN_LEASE_RENEW_SECONDS)
            time.sleep(step)
            left -= step
            if left > 0:
                with transaction(self.engine) as conn:
                    self.hold(conn)

    def release(self) -> None:
        """The run ended: the next one need not wait for the lease to expire."""
        try:
            with transaction(self.engine) as conn:
                run(conn, _LEASE_RELEASE, {"name": RUN_LEASE, "holder": self.holder})
        except Exception as exc:  # the lease expires on its own; the run's own outcome stands
            log.warning("drain: the run's lease was not released (%s); it expires", exc.__class__.__name__)


def _drain(engine: Engine, settings: Settings, *, max_passes: int, sweeps: Sequence[Sweep]) -> DrainReport:
    report = DrainReport(ran=False)
    held = _Run(engine)
    try:
        _reclaim(held, settings, max_passes, report)
        if not report.ran:
            log.info("drain: another run holds the drain; skipping")
            return report
        _sweep(held, settings, max_passes, sweeps, report)
    finally:
        if report.ran and not held.lost:
            held.release()
    if held.lost:
        log.warning("drain: another run took the drain over (this run's lease ran out); stopped")
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


def _reclaim(held: _Run, settings: Settings, max_passes: int, report: DrainReport) -> None:
    """Expired leases and passed deadlines, in bounded batches of their own transactions; the first
    transaction decides whether this run holds the drain (``report.ran``)."""
    for _ in range(max_passes):
        with transaction(held.engine) as conn:
            if not held.hold(conn):
                return
            report.ran = True
            batch = transitions.reclaim_expired(
                conn,
                limit=settings.drain_batch,
                backoff_base=settings.backoff_base_seconds,
                backoff_cap=settings.backoff_cap_seconds,
            )
        report.reclaimed.extend(batch)
        if len(batch) < settings.drain_batch:
            return


def _sweep(
    held: _Run, settings: Settings, max_passes: int, sweeps: Sequence[Sweep], report: DrainReport
) -> None:
    """The extra sweeps, each in bounded batches of its own transactions, while the run holds the drain."""
    for name, sweep in sweeps:
        if held.lost:
            return
        for _ in range(max_passes):
            began = time.monotonic()
            with transaction(held.engine) as conn:
                if not held.hold(conn):
                    break
                if isinstance(sweep, Paced):
                    run(conn, _ASYNC_COMMIT)
                n = sweep(conn, settings.drain_batch)
            report.swept[name] = report.swept.get(name, 0) + n
            if n and isinstance(sweep, Paced) and sweep.factor > 0:
                held.pause((time.monotonic() - began) * sweep.factor)
            if n < settings.drain_batch or held.lost:
                break
