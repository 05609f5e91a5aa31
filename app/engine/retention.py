"""Retention of the engine's history (issue 14): settled signals and outbox events of finished
instances are removed by the drain after the ledger's job retention (``app.ledger.retention``), in small batches, never
touching a PENDING signal or an unfinished instance."""

from __future__ import annotations

from functools import partial

from sqlalchemy import Connection, text

from app.ledger.retention import RetentionPolicy, Sweep, policy_from_env


def prune_signals(conn: Connection, limit: int, *, policy: RetentionPolicy) -> int:
    rows = conn.execute(
        text(
            """
DELETE FROM workflow_signals WHERE id IN (
    SELECT s.id FROM workflow_signals s JOIN workflow_instances i ON i.id = s.instance_id
    WHERE s.state <> 'PENDING' AND s.resolved_at < now() - make_interval(secs => :days * 86400)
      AND i.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
    ORDER BY s.resolved_at LIMIT :limit FOR UPDATE OF s SKIP LOCKED)
RETURNING id
"""
        ),
        {"days": policy.jobs_days, "limit": max(limit, policy.batch)},
    ).all()
    return len(rows)


def sweeps(policy: RetentionPolicy | None = None) -> list[Sweep]:
    p = policy or policy_from_env()
    return [
        ("retention_signals", partial(prune_signals, policy=p)),
        ("retention_events", partial(prune_events, policy=p)),
    ]


def prune_events(conn: Connection, limit: int, *, policy: RetentionPolicy) -> int:
    """Outbox events of finished instances, older than the job retention."""
    rows = conn.execute(
        text(
            """
DELETE FROM workflow_events WHERE id IN (
    SELECT e.id FROM workflow_events e JOIN workflow_instances i ON i.id = e.instance_id
    WHERE e.created_at < now() - make_interval(secs => :days * 86400)
      AND i.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
    ORDER BY e.created_at LIMIT :limit FOR UPDATE OF e SKIP LOCKED)
RETURNING id
"""
        ),
        {"days": policy.jobs_days, "limit": max(limit, policy.batch)},
    ).all()
    return len(rows)
