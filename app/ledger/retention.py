"""Retention: what the ledger keeps, and the drain sweeps that remove the rest in small
batches so the tables stay the size of the live work, not of history.

- the partitions of the attempts (a day each) and of the audit (a month each), created ahead and dropped
  whole past retention (``app.ledger.partitions``; the sweep ``history_partitions``);
- finished jobs (``succeeded`` / ``canceled``) after ``jobs_days`` (default 7; per-namespace override
  through the job's instance); their attempts go with their day's partition;
- dead letters (``dead`` / ``failed``: an operator's decision is pending) after ``dead_days`` (30);
- effect receipts whose job is gone (``job_id`` set NULL by the delete) after ``jobs_days``;
- the operation audit after ``audit_days`` (400): by month's partition; row by row only the rows of the
  namespaces that do not keep theirs longer, in a month that a longer-keeping namespace holds.

Every sweep is ``fn(conn, limit) -> rows removed``: one bounded ``DELETE ... WHERE id IN (SELECT ...
LIMIT n FOR UPDATE SKIP LOCKED)`` (its rows counted in the statement, not returned) in its own short
transaction, over finished rows only, so a sweep never waits on (or holds up) a claim, a settle or a
running executor; the drain pauses after each batch (``LEDGERFLOW_RETENTION_PAUSE``, ``drain.Paced``). The jobs are deleted in batches,
not partitioned: claims, the job list and the indexes stay as they are (see ``docs/decisions/ledger.md``,
"Retention by batched deletes, not partitions", and "History partitions the project manages itself")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial

from sqlalchemy import Connection

from app.ledger import partitions
from app.ledger.drain import Paced, Sweep
from app.ledger.models import DEAD_LETTERS, FINISHED, sql_in
from app.settings import (
    AUDIT_RETENTION_DAYS,
    DEAD_LETTER_RETENTION_DAYS,
    RETENTION_BATCH,
    RETENTION_BY_NAMESPACE,
    RETENTION_DAYS,
    RETENTION_PAUSE,
)
from app.sql import Query, query, run


@dataclass(frozen=True)
class RetentionPolicy:
    jobs_days: float = RETENTION_DAYS.default
    dead_days: float = DEAD_LETTER_RETENTION_DAYS.default
    audit_days: float = AUDIT_RETENTION_DAYS.default
    # rows per DELETE (the drain runs up to 10 of them per sweep each minute: 50k rows/min by default)
    batch: int = RETENTION_BATCH.default
    # namespace id -> days for finished jobs of that namespace's instances (and its audit, if longer
    # than audit_days it wins there too)
    by_namespace: dict[str, float] = field(default_factory=dict)
    # after each row-deleting batch, the drain waits this many times as long as it took (``drain.Paced``)
    pause: float = RETENTION_PAUSE.default

    def paced(self, fn: Callable[[Connection, int], int]) -> Paced:
        """``fn``, a sweep that deletes rows, spaced out by the drain by ``pause``."""
        return Paced(fn, self.pause)


_JOB_EFFECT_OLDER_THAN = query(
    "job_effect_older_than",
    "SELECT created_at < now() - make_interval(secs => :days * 86400) FROM workflow_jobs WHERE id = :id",
)


def may_have_pruned(conn: Connection, job_id: int, policy: RetentionPolicy | None = None) -> bool:
    """Whether rows created with job ``job_id`` may have been removed by retention since: the job is older
    than the shortest job retention. The integrations' rows (a webhook delivery, a rule's execution) are
    created in the transaction that enqueues their job and pruned only past that age, so a younger job
    whose row is missing names one that never existed (``outcome.ReferenceNotFound``)."""
    p = policy or policy_from_env()
    days = min([p.jobs_days, *p.by_namespace.values()])
    return bool(run(conn, _JOB_EFFECT_OLDER_THAN, {"id": job_id, "days": days}).scalar())


def policy_from_env() -> RetentionPolicy:
    return RetentionPolicy(
        jobs_days=RETENTION_DAYS.get(),
        dead_days=DEAD_LETTER_RETENTION_DAYS.get(),
        audit_days=AUDIT_RETENTION_DAYS.get(),
        batch=RETENTION_BATCH.get(),
        by_namespace=dict(RETENTION_BY_NAMESPACE.get()),
        pause=RETENTION_PAUSE.get(),
    )


# the retention (days) of a job: ``:days``, or, when namespaces have their own, its instance's namespace's
_DAYS = ":days"
_DAYS_BY_NAMESPACE = (
    "COALESCE((SELECT o.days FROM workflow_instances i JOIN unnest(CAST(:ns_ids AS text[]), "
    "CAST(:ns_days AS float8[])) AS o(ns, days) ON o.ns = i.namespace_id WHERE i.id = j.instance_id), :days)"
)


def _prune_jobs_query(dead: bool, by_namespace: bool) -> Query:
    # the predicate of this retention's partial index (ix_workflow_jobs_finished / _dead_letters); the
    # index range uses the smallest retention that applies (:min_days), the per-row check the exact one
    statuses = sql_in("j.status", DEAD_LETTERS if dead else FINISHED)
    days = _DAYS_BY_NAMESPACE if by_namespace else _DAYS
    return query(
        f"jobs_prune{'_dead' if dead else ''}{'_by_namespace' if by_namespace else ''}",
        f"""
WITH removed AS (DELETE FROM workflow_jobs WHERE id IN (
    SELECT j.id FROM workflow_jobs j
    WHERE {statuses}
      AND j.finished_at < now() - make_interval(secs => :min_days * 86400)
      AND j.finished_at < now() - make_interval(secs => {days} * 86400)
    ORDER BY j.finished_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED)
RETURNING 1)
SELECT count(*) FROM removed
""",
    )


_PRUNE_JOBS = {
    (dead, by_ns): _prune_jobs_query(dead, by_ns) for dead in (False, True) for by_ns in (False, True)
}


def prune_jobs_sql(policy: RetentionPolicy, *, dead: bool = False) -> tuple[Query, dict]:
    """The DELETE of one batch (``:limit`` rows) of finished jobs (or dead letters) past their
    retention, and its parameters but ``limit``."""
    default = policy.dead_days if dead else policy.jobs_days
    params: dict = {"days": default}
    if policy.by_namespace:
        params.update(ns_ids=list(policy.by_namespace), ns_days=list(policy.by_namespace.values()))
    params["min_days"] = min([default, *policy.by_namespace.values()]) if not dead else default
    return _PRUNE_JOBS[dead, bool(policy.by_namespace)], params


def prune_jobs(conn: Connection, limit: int, *, policy: RetentionPolicy, dead: bool = False) -> int:
    """Finished jobs (or dead letters) older than their retention; attempts go with them."""
    statement, params = prune_jobs_sql(policy, dead=dead)
    return int(run(conn, statement, {**params, "limit": max(limit, policy.batch)}).scalar_one())


_JOB_EFFECTS_PRUNE = query(
    "job_effects_prune",
    """
WITH removed AS (DELETE FROM workflow_job_effects WHERE id IN (
    SELECT id FROM workflow_job_effects
    WHERE job_id IS NULL AND created_at < now() - make_interval(secs => :days * 86400)
    ORDER BY created_at LIMIT :limit FOR UPDATE SKIP LOCKED)
RETURNING 1)
SELECT count(*) FROM removed
""",
)


def prune_receipts(conn: Connection, limit: int, *, policy: RetentionPolicy) -> int:
    """Effect receipts whose job was removed (``job_id`` NULL) and that are older than the retention."""
    params = {"days": policy.jobs_days, "limit": max(limit, policy.batch)}
    return int(run(conn, _JOB_EFFECTS_PRUNE, params).scalar_one())


# marks the transaction as the retention path (``SET LOCAL ledgerflow.retention = 'on'``), which the audit
# table's trigger lets delete rows older than 30 days
AUDIT_RETENTION_MARK = query(
    "audit_retention_mark",
    "SELECT set_config('ledgerflow.retention', 'on', true)",
)


# a namespace's longer audit retention (``:ns_ids`` / ``:ns_days``, empty arrays when none) keeps its rows
_AUDIT_PRUNE = query(
    "audit_prune",
    """
WITH removed AS (DELETE FROM operation_audit WHERE id IN (
    SELECT a.id FROM operation_audit a
    WHERE a.created_at < now() - make_interval(secs => :days * 86400)
      AND NOT EXISTS (SELECT 1 FROM unnest(CAST(:ns_ids AS text[]), CAST(:ns_days AS float8[])) AS o(ns, days)
                      WHERE o.ns = a.namespace_id AND a.created_at >= now() - make_interval(secs => o.days * 86400))
    ORDER BY a.created_at LIMIT :limit FOR UPDATE SKIP LOCKED)
RETURNING 1)
SELECT count(*) FROM removed
""",
)


def prune_audit(conn: Connection, limit: int, *, policy: RetentionPolicy) -> int:
    """Operation audit rows older than ``audit_days`` (a namespace override longer than that wins).
    The audit is append-only in the database (a trigger); the sweep marks its transaction as the
    retention path, which the trigger lets delete rows older than 30 days and nothing else."""
    keep_longer = {ns: d for ns, d in policy.by_namespace.items() if d > policy.audit_days}
    if not keep_longer:
        return 0  # every row past the retention is in a partition past it: dropped whole (``partitions``)
    run(conn, AUDIT_RETENTION_MARK)
    params = {
        "days": policy.audit_days,
        "limit": max(limit, policy.batch),
        "ns_ids": list(keep_longer),
        "ns_days": list(keep_longer.values()),
    }
    return int(run(conn, _AUDIT_PRUNE, params).scalar_one())


def _ago(days: float) -> datetime:
    return datetime.now(UTC) - timedelta(days=days)


def attempts_horizon(policy: RetentionPolicy) -> datetime:
    """A day of attempts may be dropped once it is older than the shortest job retention: an attempt of a
    job that still exists keeps its partition (``partitions.EXECUTIONS.keeps``)."""
    return _ago(min([policy.jobs_days, *policy.by_namespace.values()]))


def audit_horizon(policy: RetentionPolicy) -> datetime:
    """A month of audit may be dropped once it is older than the longest audit retention of any namespace."""
    return _ago(max([policy.audit_days, *policy.by_namespace.values()]))


def partition_tables(policy: RetentionPolicy) -> list[tuple[partitions.History, Callable[[], datetime]]]:
    return [
        (partitions.EXECUTIONS, partial(attempts_horizon, policy)),
        (partitions.AUDIT, partial(audit_horizon, policy)),
    ]


def sweeps(policy: RetentionPolicy | None = None) -> list[Sweep]:
    """The ledger's retention sweeps for ``drain(..., sweeps=...)``: the partitions of the attempts and
    the audit first (created ahead, dropped past retention), then the row deletes (paced: ``pause``)."""
    p = policy or policy_from_env()
    return [
        ("history_partitions", partitions.sweeper(partition_tables(p))),
        ("retention_jobs", p.paced(partial(prune_jobs, policy=p))),
        ("retention_dead_letters", p.paced(partial(prune_jobs, policy=p, dead=True))),
        ("retention_receipts", p.paced(partial(prune_receipts, policy=p))),
        ("retention_audit", p.paced(partial(prune_audit, policy=p))),
    ]
