"""Retention of the engine's history, run by the drain in small ``SKIP LOCKED`` batches:

- the event batches' partitions (a week each, ``EVENT_BATCHES``): created ahead, dropped whole once past
  the audit retention and holding no batch of an unfinished or held workflow (``event_partitions``);
- settled signals and outbox event batches of finished instances, after the ledger's job retention
  (``app.ledger.retention``), never a PENDING signal or anything of an unfinished instance;
- finished workflows themselves (``retention_workflows``): a workflow that ended more than its
  namespace's workflow retention ago (``LEDGERFLOW_WORKFLOW_RETENTION_DAYS``, by namespace
  ``LEDGERFLOW_WORKFLOW_RETENTION_BY_NAMESPACE``; at least a day) and is not held (``hold``) is removed
  with its steps, activations, tasks, waits, signals and event batches, in one statement per batch. The
  event batches that carry audit entries stay for the audit's own, longer retention (``prune_events``).
  A workflow is kept while a job of it is unfinished (its events still being delivered, a dead letter
  awaiting an operator) or while its parent is unfinished.

What answers for a removed workflow (docs/reference.md, "Retention of finished workflows"): its routes
answer 404 ``NOT_FOUND`` like any unknown id; the namespace's audit keeps its entries."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import Connection

from app.engine.states import TERMINAL, ended_sql
from app.errors import InvalidArgument
from app.idempotency import RETENTION_HOURS
from app.ledger import partitions
from app.ledger.drain import DRAIN_LOCK, DRAIN_LOCK_KEY
from app.ledger.models import FINISHED, sql_in
from app.ledger.retention import RetentionPolicy, Sweep, policy_from_env
from app.settings import (
    MAX_RETENTION_DAYS,
    RETENTION_BATCH,
    WORKFLOW_RETENTION_BY_NAMESPACE,
    WORKFLOW_RETENTION_DAYS,
)
from app.sql import query, run

_ENDED_STATES = sorted(str(s) for s in TERMINAL)
_ENDED = ended_sql("i")


@dataclass(frozen=True)
class WorkflowRetention:
    """How long finished workflows are kept: ``days`` unless their namespace has its own."""

    days: float = WORKFLOW_RETENTION_DAYS.default
    by_namespace: dict[str, float] = field(default_factory=dict)
    batch: int = RETENTION_BATCH.default

    def days_of(self, namespace_id: str) -> float:
        return self.by_namespace.get(namespace_id, self.days)

    def params(self) -> dict[str, Any]:
        return {
            "days": self.days,
            "ns_ids": list(self.by_namespace),
            "ns_days": list(self.by_namespace.values()),
            # the shortest retention of any namespace: a range on the finished index before the per-row test
            "least_days": min([self.days, *self.by_namespace.values()]),
        }


def workflow_retention_from_env() -> WorkflowRetention:
    return WorkflowRetention(
        days=WORKFLOW_RETENTION_DAYS.get(),
        by_namespace=dict(WORKFLOW_RETENTION_BY_NAMESPACE.get()),
        batch=RETENTION_BATCH.get(),
    )


# When a finished instance ``i`` is due for removal: its end plus its namespace's retention; with a hold
# that ends later, that.
_DUE = """i.completed_at + make_interval(secs => COALESCE(
        (SELECT o.days FROM unnest(CAST(:ns_ids AS text[]), CAST(:ns_days AS float8[])) AS o(ns, days)
         WHERE o.ns = i.namespace_id), :days) * 86400)"""
_REMOVES_AT = f"GREATEST({_DUE}, i.hold_until)"

# The finished instances that may go now: each namespace's oldest ends first (``ix_workflow_instances_finished``),
# at most ``limit`` of each, then ``limit`` in all. The planner checks the candidates' unfinished jobs, by its
# estimates, with an anti-join over the job table (a sequential scan per batch: 6,800 pages and 42 ms at
# 200,000 jobs) or with a lookup per candidate (``ix_workflow_jobs_instance``). Forcing the lookups
# (``OFFSET 0``) was measured (``bench.retention``, 200,000 workflows) and undone: claim p99 during the
# removal 2.1x alone instead of 1.4-1.6x; the scan reads through a small ring of buffers, while the lookups'
# heap reads of old jobs go through shared_buffers and push out the pages the claims use.
_REMOVABLE = f"""
SELECT r.id FROM namespaces n CROSS JOIN LATERAL (
    SELECT i.id, i.completed_at FROM workflow_instances i
    WHERE i.namespace_id = n.id AND {_ENDED}
      AND i.completed_at < now() - make_interval(secs => :least_days * 86400)
      AND {_REMOVES_AT} < now()
      AND NOT EXISTS (SELECT 1 FROM workflow_jobs j WHERE j.instance_id = i.id AND NOT {sql_in("j.status", FINISHED)})
      AND NOT EXISTS (SELECT 1 FROM workflow_instances p WHERE p.id = i.parent_instance_id
                      AND NOT {sql_in("p.state", _ENDED_STATES)})
    ORDER BY i.completed_at, i.id
    LIMIT :limit
    FOR UPDATE OF i SKIP LOCKED
) r
ORDER BY r.completed_at, r.id
LIMIT :limit
"""


def _unaudited(prefix: str = "") -> str:
    """SQL: a batch row without audit entries: a row written since migration 0038 keeps them in
    ``audit_json`` (NULL: none), one written before in ``audit`` ('[]': none)."""
    return f"({prefix}audit_json IS NULL AND COALESCE({prefix}audit, '[]'::jsonb) = '[]'::jsonb)"


# One batch of finished workflows with everything that is theirs alone (each by an index of its table), and
# how many went (counted here: the drain runs in the worker process beside the pool, and building a
# batch's thousands of returned ids in Python holds its interpreter lock from the pool's claims). The
# foreign keys (steps, activations, waits, tasks, signals -> instance; activations, tasks -> step) are
# checked at the end of the statement, when every sub-statement has run, each deleted row's by an index of
# the referencing table (migration 0032_fk_indexes; ``tests/db/test_schema.py`` checks that every foreign
# key into a table rows are deleted from has one).
REMOVE_FINISHED_WORKFLOWS = query(
    "workflow_remove_finished",
    f"""
WITH doomed AS ({_REMOVABLE}),
s AS (DELETE FROM workflow_signals WHERE instance_id IN (SELECT id FROM doomed)),
w AS (DELETE FROM workflow_waits WHERE instance_id IN (SELECT id FROM doomed)),
t AS (DELETE FROM workflow_tasks WHERE instance_id IN (SELECT id FROM doomed)),
a AS (DELETE FROM workflow_activations WHERE instance_id IN (SELECT id FROM doomed)),
st AS (DELETE FROM workflow_steps WHERE instance_id IN (SELECT id FROM doomed)),
e AS (DELETE FROM workflow_event_batches WHERE instance_id IN (SELECT id FROM doomed) AND {_unaudited()}),
gone AS (DELETE FROM workflow_instances WHERE id IN (SELECT id FROM doomed) RETURNING 1)
SELECT count(*) FROM gone
""",
)

# The finished workflows of a namespace that retention removes next, in the order it will (the oldest end
# first, read from ``ix_workflow_instances_finished``); a workflow held past its retention is not among them.
NEXT_REMOVALS = query(
    "workflow_next_removals",
    f"""
SELECT i.id, i.definition_id, i.version, i.state, i.business_key, i.completed_at, i.hold_until
FROM workflow_instances i
WHERE i.namespace_id = :ns AND {_ENDED}
  AND (i.hold_until IS NULL OR i.hold_until <= {_DUE})
ORDER BY i.completed_at, i.id
LIMIT :limit
""",
)

SET_HOLD = query(
    "workflow_set_hold",
    """
UPDATE workflow_instances SET hold_until = :until WHERE id = :id
RETURNING id, state, completed_at, hold_until
""",
)


def prune_workflows(conn: Connection, limit: int, *, policy: WorkflowRetention) -> int:
    """Remove one batch of finished workflows past their retention (the drain's ``retention_workflows``)."""
    params = {**policy.params(), "limit": max(limit, policy.batch)}
    return int(run(conn, REMOVE_FINISHED_WORKFLOWS, params).scalar_one())


def removes_at(completed_at: datetime | None, days: float, hold_until: datetime | None) -> datetime | None:
    """When retention may remove a workflow (as ``_REMOVES_AT`` says in SQL): None while it runs."""
    if completed_at is None:
        return None
    at = completed_at + timedelta(days=days)
    return max(at, hold_until) if hold_until is not None else at


def _view(row: Any, days: float) -> dict[str, Any]:
    return {
        "workflow_id": row.id,
        "state": row.state,
        "completed_at": row.completed_at,
        "hold_until": row.hold_until,
        "retention_days": days,
        "removes_at": removes_at(row.completed_at, days, row.hold_until),
    }


def next_removals(
    conn: Connection, namespace_id: str, limit: int, policy: WorkflowRetention | None = None
) -> dict[str, Any]:
    """The namespace's retention and its finished workflows in the order retention will remove them
    (``removes_at``: the end plus the retention, or the hold when later; removal happens at the first
    drain after it, once the workflow has no unfinished job and no unfinished parent)."""
    p = policy or workflow_retention_from_env()
    days = p.days_of(namespace_id)
    rows = run(conn, NEXT_REMOVALS, {**p.params(), "ns": namespace_id, "limit": limit}).all()
    items = [
        {
            **_view(r, days),
            "definition_id": r.definition_id,
            "version": r.version,
            "business_key": r.business_key,
        }
        for r in rows
    ]
    return {"retention_days": days, "items": items}


def set_hold(
    conn: Connection, inst: dict[str, Any], until: datetime | None, policy: WorkflowRetention | None = None
) -> dict[str, Any]:
    """Set (or, ``until`` None, release) the hold of a workflow read under the caller's checks; its
    retention view. A hold later than ``MAX_RETENTION_DAYS`` ahead is refused."""
    p = policy or workflow_retention_from_env()
    if until is not None and until > datetime.now(UTC) + timedelta(days=MAX_RETENTION_DAYS):
        raise InvalidArgument(field="hold_until", message=f"at most {MAX_RETENTION_DAYS:g} days ahead")
    row = run(conn, SET_HOLD, {"id": inst["id"], "until": until}).one()
    return _view(row, p.days_of(inst["namespace_id"]))


# settled (not PENDING) signals of finished instances, past the retention
_SIGNALS_PRUNE = query(
    "signals_prune",
    f"""
WITH removed AS (DELETE FROM workflow_signals WHERE id IN (
    SELECT x.id FROM workflow_signals x JOIN workflow_instances i ON i.id = x.instance_id
    WHERE x.state <> 'PENDING' AND x.resolved_at < now() - make_interval(secs => :days * 86400)
      AND {_ENDED}
    ORDER BY x.resolved_at LIMIT :limit FOR UPDATE OF x SKIP LOCKED)
RETURNING 1)
SELECT count(*) FROM removed
""",
)


def prune_signals(conn: Connection, limit: int, *, policy: RetentionPolicy) -> int:
    """Settled (not PENDING) signals of finished instances."""
    return int(
        run(conn, _SIGNALS_PRUNE, {"days": policy.jobs_days, "limit": max(limit, policy.batch)}).scalar_one()
    )


# a namespace's longer audit retention (``:ns_ids`` / ``:ns_days``, empty arrays when none) keeps the
# batches with audit entries of its instances
_EVENT_BATCHES_PRUNE = query(
    "event_batches_prune",
    f"""
WITH removed AS (DELETE FROM workflow_event_batches WHERE id IN (
    SELECT x.id FROM workflow_event_batches x
    WHERE x.created_at < now() - make_interval(secs => :days * 86400)
      AND ({_unaudited("x.")} OR (x.created_at < now() - make_interval(secs => :audit_days * 86400)
           AND NOT EXISTS (SELECT 1 FROM unnest(CAST(:ns_ids AS text[]), CAST(:ns_days AS float8[])) AS o(ns, days)
                           WHERE o.ns = x.namespace_id
                             AND x.created_at >= now() - make_interval(secs => o.days * 86400))))
      AND (x.start_response IS NULL OR x.created_at < now() - make_interval(hours => :key_hours))
      -- of a finished instance, or of one retention removed (its batches with audit entries stay till here)
      AND NOT EXISTS (SELECT 1 FROM workflow_instances i WHERE i.id = x.instance_id AND NOT {_ENDED})
    ORDER BY x.created_at LIMIT :limit FOR UPDATE OF x SKIP LOCKED)
RETURNING 1)
SELECT count(*) FROM removed
""",
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
    params.update(ns_ids=list(keep_longer), ns_days=list(keep_longer.values()))
    return int(run(conn, _EVENT_BATCHES_PRUNE, params).scalar_one())


# The event batches, partitioned by week (migration 0031_history_partitions). A week is dropped once its
# whole range is older than the longest retention any batch may have (the audit's: a batch holds the
# engine's audit entries) and no batch in it is of a workflow that is unfinished or held; until then the
# row deletes above (``prune_events``, ``retention_workflows``) remove what may go from it.
EVENT_BATCHES = partitions.History(
    "workflow_event_batches",
    "created_at",
    "week",
    (
        "ALTER TABLE {p} ADD CONSTRAINT {p}_pkey PRIMARY KEY (id)",
        "CREATE UNIQUE INDEX {p}_seq ON {p} (instance_id, last_seq)",
        "CREATE INDEX {p}_instance ON {p} (namespace_id, instance_id)",
        "CREATE INDEX {p}_dispatch ON {p} (dispatch_job_id) WHERE dispatch_job_id IS NOT NULL",
        "CREATE INDEX {p}_created ON {p} (created_at)",
    ),
    # a batch of a workflow that still exists and is unfinished or held: for each namespace of the partition
    # (a skip scan of its index), the instances created before the week's end (and a day: a transaction
    # that began before the instance's may write its batch) that are live or held, each looked up in the
    # partition's index
    keeps=f"""WITH RECURSIVE ns AS (
        (SELECT x.namespace_id FROM {{p}} x ORDER BY x.namespace_id LIMIT 1)
        UNION ALL
        SELECT (SELECT x.namespace_id FROM {{p}} x WHERE x.namespace_id > ns.namespace_id
                ORDER BY x.namespace_id LIMIT 1)
        FROM ns WHERE ns.namespace_id IS NOT NULL)
    SELECT EXISTS (SELECT 1 FROM ns CROSS JOIN LATERAL (
        SELECT 1 FROM workflow_instances i
        WHERE i.namespace_id = ns.namespace_id AND i.created_at < :hi + interval '1 day'
          AND (NOT {_ENDED} OR i.hold_until > now())
          AND EXISTS (SELECT 1 FROM {{p}} x WHERE x.namespace_id = i.namespace_id AND x.instance_id = i.id)
        LIMIT 1) k)""",
)


# Every partitioned history table: the engine's and the ledger's.
HISTORY = (EVENT_BATCHES, partitions.EXECUTIONS, partitions.AUDIT)


def settle_history(conn: Connection, spec: partitions.History) -> bool:
    """The partitions of ``spec`` as the drain leaves them (``partitions.ensure``): the legacy DEFAULT
    partition an upgrade of an installation with rows left (migration 0031_history_partitions) validated
    and made the range up to its cutoff, partitions created a week ahead. The release phase runs it right
    after the migrations (``ledgerflow db upgrade``), each table in a transaction of its own. False when
    the DEFAULT partition is still there (its table was busy past the lock timeout: the drain does it).
    Under the drain's lock (waited for), as the drain's own sweeps: two never create one partition."""
    run(conn, DRAIN_LOCK, {"k": DRAIN_LOCK_KEY})
    partitions.ensure(conn, spec)
    parts = partitions.partitions(conn, spec.table)
    return not (parts and parts[0].default)


def events_horizon(policy: RetentionPolicy) -> datetime:
    """A week of event batches may be dropped once it is older than every retention a batch may have."""
    days = max([policy.jobs_days, policy.audit_days, *policy.by_namespace.values(), RETENTION_HOURS / 24])
    return datetime.now(UTC) - timedelta(days=days)


def sweeps(policy: RetentionPolicy | None = None, workflows: WorkflowRetention | None = None) -> list[Sweep]:
    p = policy or policy_from_env()
    return [
        ("event_partitions", partitions.sweeper([(EVENT_BATCHES, partial(events_horizon, p))])),
        ("retention_signals", p.paced(partial(prune_signals, policy=p))),
        ("retention_events", p.paced(partial(prune_events, policy=p))),
        (
            "retention_workflows",
            p.paced(partial(prune_workflows, policy=workflows or workflow_retention_from_env())),
        ),
    ]
