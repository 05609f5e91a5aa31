"""What an engine transaction writes once, at its commit, in ONE named statement
(``engine_commit_batch``): its event batches (``app.engine.events``: one row of
``workflow_event_batches`` per instance, or a few for a very long transaction) and its changes of the
namespaces' unfinished instances (``app.engine.quotas``: one upsert of ``workflow_quota_counts`` per
namespace). ``app.sql.at_commit`` sends it with the COMMIT in one round trip; a rollback drops it."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection

from app.ids import new_id
from app.sql import CommitBuffer, Query, at_commit, query

# Two backends whose pids share a stripe wait for each other's commit when they commit together (the row
# lock of the upsert, held through the commit's WAL flush): with 16 stripes a start's commit-time statement
# took 0.71 ms on average (max 26 ms) in the task-task bench, with 64 0.18 ms (max 1.9 ms); the quota
# check sums the namespace's rows, 64 at most.
STRIPES = 64
# Events and audit entries of one batch row: their ids are the batch's first 29 hex digits and a 3-hex
# ordinal (events 0..2047, audit entries 2048..4095); a transaction with more writes several batches.
BATCH_EVENTS = 2048
BATCH_AUDIT = 2048

# The quota counts: one upsert per namespace (its stripe: the committing backend's pid modulo STRIPES).
# The batches: each continues its instance's sequence from the instance's newest batch (none: from 1); the
# batches of one instance in this statement follow one another (``before``: the events of the batches
# before it here). Every writer of an instance's events holds its row lock.
ENGINE_COMMIT_BATCH = query(
    "engine_commit_batch",
    f"""
WITH counted AS (
    INSERT INTO workflow_quota_counts AS c (namespace_id, stripe, unfinished)
    SELECT d.ns, pg_backend_pid() % {STRIPES}, d.change
    FROM unnest(CAST(:count_namespaces AS text[]), CAST(:count_changes AS bigint[])) AS d(ns, change)
    ON CONFLICT (namespace_id, stripe) DO UPDATE SET unfinished = c.unfinished + EXCLUDED.unfinished),
b AS (
    SELECT b.*, sum(b.n) OVER (PARTITION BY b.iid ORDER BY b.ord) - b.n AS before
    FROM json_to_recordset(CAST(:batches AS json)) AS b(ord int, id text, iid text, n int, events json,
        audit json, job bigint, response text))
INSERT INTO workflow_event_batches (id, namespace_id, instance_id, first_seq, last_seq, definition_id, instance,
    trace_id, events, audit, dispatch_job_id, start_response)
SELECT b.id, i.namespace_id, i.id,
    CASE WHEN b.n > 0 THEN s.last + b.before + 1 END, CASE WHEN b.n > 0 THEN s.last + b.before + b.n END,
    i.definition_id, jsonb_build_object('id', i.id, 'definition_id', i.definition_id, 'version', i.version,
        'state', i.state, 'paused', i.paused, 'business_key', i.business_key),
    i.trace_id, CAST(b.events AS jsonb), CAST(b.audit AS jsonb), b.job, b.response
FROM b JOIN workflow_instances i ON i.id = b.iid,
    -- the partitions (by week, migration 0031) from the instance's creation on: a batch is written by a
    -- transaction that sees the instance (no transaction lasts a day, so none began a day before it)
    LATERAL (SELECT COALESCE(max(last_seq), 0) AS last FROM workflow_event_batches WHERE instance_id = i.id
             AND created_at >= i.created_at - interval '1 day') s
""",
)


def batch_id() -> str:
    """A new batch id: 29 random hex digits and ``000`` (the ordinal of its first event)."""
    return new_id()[:29] + "000"


class InstanceBatch:
    """The events and audit entries of one instance in one transaction."""

    __slots__ = ("events", "audit", "job", "response")

    def __init__(self, job: int | None) -> None:
        self.events: list[str] = []  # JSON texts of {"type", "data"}
        self.audit: list[str] = []  # JSON texts of the audit entries (the engine's, a start's)
        self.job = job
        self.response: str | None = None  # the exact response of the start that created the instance


class CommitBatch(CommitBuffer):
    """One transaction's event batches by instance and quota count changes by namespace."""

    def __init__(self) -> None:
        self.by_instance: dict[str, InstanceBatch] = {}
        self.jobs: dict[str, int | None] = {}  # the dispatch job of each instance (None: nobody listens)
        self.known: dict[str, tuple[bool, str]] = {}  # (listened, trace id) read before the first event
        self.unfinished: dict[str, int] = {}  # the change of each namespace's unfinished instances

    def statements(self) -> list[tuple[Query, dict[str, Any]]]:
        counts = [(ns, n) for ns, n in self.unfinished.items() if n]
        if not counts and not self.by_instance:
            return []
        rows: list[str] = []
        for iid, b in self.by_instance.items():
            n_chunks = max(1, -(-len(b.events) // BATCH_EVENTS), -(-len(b.audit) // BATCH_AUDIT))
            for k in range(n_chunks):
                evs = b.events[k * BATCH_EVENTS : (k + 1) * BATCH_EVENTS]
                aud = b.audit[k * BATCH_AUDIT : (k + 1) * BATCH_AUDIT]
                head = json.dumps(
                    {
                        "ord": len(rows),
                        "id": batch_id(),
                        "iid": iid,
                        "n": len(evs),
                        "job": b.job,
                        "response": b.response if k == 0 else None,
                    }
                )
                # the events and audit entries are JSON texts already: spliced in, not encoded again
                rows.append(f'{head[:-1]}, "events": [{",".join(evs)}], "audit": [{",".join(aud)}]}}')
        params = {
            "count_namespaces": [ns for ns, _ in counts],
            "count_changes": [n for _, n in counts],
            "batches": "[" + ",".join(rows) + "]",
        }
        return [(ENGINE_COMMIT_BATCH, params)]


def of(conn: Connection) -> CommitBatch:
    """The commit batch of ``conn``'s transaction."""
    return at_commit(conn, "engine_commit_batch", CommitBatch)
