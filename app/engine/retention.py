"""Retention of the engine's history: settled signals and outbox event batches of finished
instances are removed by the drain after the ledger's job retention (``app.ledger.retention``), in
small ``SKIP LOCKED`` batches, never touching a PENDING signal or an unfinished instance."""

from __future__ import annotations

from functools import partial

from sqlalchemy import Connection

from app.idempotency import RETENTION_HOURS
from app.ledger.retention import RetentionPolicy, Sweep, policy_from_env
from app.sql import run


def _prune_of_finished(
    conn: Connection, table: str, age_column: str, where: str, limit: int, policy: RetentionPolicy
) -> int:
    """Rows of ``table`` (``where`` holds) of finished instances, ``age_column`` past the retention."""
    rows = run(
        conn,
        f"""
DELETE FROM {table} WHERE id IN (
    SELECT x.id FROM {table} x JOIN workflow_instances i ON i.id = x.instance_id
    WHERE {where} x.{age_column} < now() - make_interval(secs => :days * 86400)
      AND i.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
    ORDER BY x.{age_column} LIMIT :limit FOR UPDATE OF x SKIP LOCKED)
RETURNING id
""",
        {"days": policy.jobs_days, "limit": max(limit, policy.batch)},
    ).all()
    return len(rows)


def prune_signals(conn: Connection, limit: int, *, policy: RetentionPolicy) -> int:
    """Settled (not PENDING) signals of finished instances."""
    return _prune_of_finished(
        conn, "workflow_signals", "resolved_at", "x.state <> 'PENDING' AND", limit, policy
    )


def prune_events(conn: Connection, limit: int, *, policy: RetentionPolicy) -> int:
    """Event batches of finished instances: after the job retention, or, when a batch also holds audit
    entries (the engine's advances, a start), after the audit retention (a namespace's longer one wins);
    a start's batch, which keeps its response for a resent start, never before its Idempotency-Key
    expires (``app.idempotency.RETENTION_HOURS``) whatever the retentions say."""
    params: dict = {
        "days": policy.jobs_days,
        "audit_days": policy.audit_days,
        "key_hours": RETENTION_HOURS,
        "limit": max(limit, policy.batch),
    }
    keep_longer = {ns: d for ns, d in policy.by_namespace.items() if d > policy.audit_days}
    extra = ""
    if keep_longer:
        params.update(ns_ids=list(keep_longer), ns_days=list(keep_longer.values()))
        extra = (
            " AND NOT EXISTS (SELECT 1 FROM unnest(CAST(:ns_ids AS text[]), CAST(:ns_days AS float8[])) "
            "AS o(ns, days) WHERE o.ns = x.namespace_id AND x.created_at >= now() - make_interval(secs => o.days * 86400))"
        )
    rows = run(
        conn,
        f"""
DELETE FROM workflow_event_batches WHERE id IN (
    SELECT x.id FROM workflow_event_batches x JOIN workflow_instances i ON i.id = x.instance_id
    WHERE x.created_at < now() - make_interval(secs => :days * 86400)
      AND (x.audit = '[]'::jsonb OR (x.created_at < now() - make_interval(secs => :audit_days * 86400){extra}))
      AND (x.start_response IS NULL OR x.created_at < now() - make_interval(hours => :key_hours))
      AND i.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
    ORDER BY x.created_at LIMIT :limit FOR UPDATE OF x SKIP LOCKED)
RETURNING id
""",
        params,
    ).all()
    return len(rows)


def sweeps(policy: RetentionPolicy | None = None) -> list[Sweep]:
    p = policy or policy_from_env()
    return [
        ("retention_signals", partial(prune_signals, policy=p)),
        ("retention_events", partial(prune_events, policy=p)),
    ]
