"""Retention of the integrations' logs: webhook deliveries and automation executions older
than the ledger's job retention whose job has finished (or was already removed) are deleted by the
drain in small ``SKIP LOCKED`` batches, like the ledger's own history (``app.ledger.retention``)."""

from __future__ import annotations

from functools import partial

from sqlalchemy import Connection

from app.ledger.retention import RetentionPolicy, Sweep, policy_from_env
from app.sql import query, run

_LIVE_JOB = "EXISTS (SELECT 1 FROM workflow_jobs j WHERE j.id = x.job_id AND j.status IN ('pending', 'running', 'paused'))"


_PRUNE_SQL = f"""
WITH removed AS (DELETE FROM {{table}} WHERE id IN (
    SELECT x.id FROM {{table}} x
    WHERE x.created_at < now() - make_interval(secs => :days * 86400) AND NOT {_LIVE_JOB}
    ORDER BY x.created_at LIMIT :limit FOR UPDATE OF x SKIP LOCKED)
RETURNING 1)
SELECT count(*) FROM removed
"""
_PRUNE = {
    table: query(f"{table}_prune", _PRUNE_SQL.format(table=table))
    for table in ("webhook_deliveries", "automation_executions")
}


def _prune(conn: Connection, table: str, limit: int, policy: RetentionPolicy) -> int:
    params = {"days": policy.jobs_days, "limit": max(limit, policy.batch)}
    return int(run(conn, _PRUNE[table], params).scalar_one())


def prune_deliveries(conn: Connection, limit: int, *, policy: RetentionPolicy) -> int:
    return _prune(conn, "webhook_deliveries", limit, policy)


def prune_executions(conn: Connection, limit: int, *, policy: RetentionPolicy) -> int:
    return _prune(conn, "automation_executions", limit, policy)


def sweeps(policy: RetentionPolicy | None = None) -> list[Sweep]:
    p = policy or policy_from_env()
    return [
        ("retention_webhook_deliveries", p.paced(partial(prune_deliveries, policy=p))),
        ("retention_automation_executions", p.paced(partial(prune_executions, policy=p))),
    ]
