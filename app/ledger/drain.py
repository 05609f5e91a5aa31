"""System task ``workflow-jobs-drain`` (L-PAUSE-5): reclaim expired leases and passed deadlines,
re-publish wake hints for due jobs. Never runs handlers. One runner at a time (advisory lock)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy import Engine, text

from app.config import Settings
from app.db import transaction
from app.ledger import transitions
from app.ledger.hints import publish_now

log = logging.getLogger(__name__)

DRAIN_LOCK_KEY = 7426002
_DUE_QUEUES = text(
    """
SELECT q.queue FROM (VALUES ('workflow-ledger'), ('workflow-ledger-outbound')) AS q(queue)
WHERE EXISTS (SELECT 1 FROM workflow_jobs j
              WHERE j.queue = q.queue AND j.status = 'pending' AND j.run_at <= now())
"""
)


@dataclass
class DrainReport:
    ran: bool
    reclaimed: list[dict] = field(default_factory=list)
    hinted_queues: list[str] = field(default_factory=list)

    @property
    def to_pending(self) -> int:
        return sum(1 for r in self.reclaimed if r["status"] == "pending")

    @property
    def to_dead(self) -> int:
        return sum(1 for r in self.reclaimed if r["status"] == "dead")


def drain(engine: Engine, settings: Settings, *, max_passes: int = 10) -> DrainReport:
    """One drain run: bounded passes of ``settings.drain_batch`` reclaims, then hints."""
    report = DrainReport(ran=False)
    for _ in range(max_passes):
        with transaction(engine) as conn:
            if not conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": DRAIN_LOCK_KEY}).scalar():
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
    with engine.connect() as conn:
        report.hinted_queues = [r.queue for r in conn.execute(_DUE_QUEUES)]
    for queue in report.hinted_queues:
        publish_now(queue)
    if report.reclaimed:
        log.warning(
            "drain: reclaimed %d job(s): %d back to pending, %d dead",
            len(report.reclaimed),
            report.to_pending,
            report.to_dead,
        )
    return report
