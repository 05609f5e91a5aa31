"""The namespace quotas of new work (SPEC W-START-8, W-ERR 429 QUEUE_FULL / APPLICATION_FULL), kept as
counts instead of counted at every start, without a row that every start or task change must update
and without serializing a namespace's starts.

**The counts.** ``workflow_quota_counts`` holds, per namespace and stripe (the committing backend's pid
modulo 16, so concurrent commits touch different rows), the unfinished instances, the open (PENDING or
CLAIMED) tasks and the open tasks of each queue. The transitions report each change (``instance`` and
``task``) to the transaction's buffer, which writes them with ONE statement at commit, and none when
they cancel out (a task step that completes and opens the next task on the same queue changes nothing).
A claim changes no count: the PENDING tasks of a queue are its open tasks minus its live claims, which
are read from ``ix_workflow_tasks_claimed_lease`` (claimed tasks only: the work in flight).

**The check** (``check``, last in a start's transaction). Far from every cap, a start takes the
namespace's start lock in SHARE mode, in the statement that reads its figures: starts run and commit in
parallel. Near a cap it takes it EXCLUSIVE, which waits for the starts in flight and keeps new ones out
until it commits, and reads the figures again: exact. "Far" leaves room for every start that may be in
flight: at most one per server connection (``max_connections``), each with at most
``TASKS_PER_TRANSACTION`` tasks. Under either lock a start never ends above a cap."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, text

from app import settings
from app.errors import LimitExceeded, QuotaExceeded
from app.sql import CommitBuffer, buffer, defer, run

STRIPES = 16
# the most tasks one engine transaction opens: every step of a definition (128) activated at once, and as
# many compensation tasks
TASKS_PER_TRANSACTION = 256


# --------------------------------------------------------------------------- the counts
class _Deltas(CommitBuffer):
    """One transaction's changes of the counts, by namespace: [unfinished, open tasks, {queue: open}]."""

    def __init__(self) -> None:
        self.by_ns: dict[str, list[Any]] = {}

    def _of(self, ns: str) -> list[Any]:
        found = self.by_ns.get(ns)
        if found is None:
            found = self.by_ns[ns] = [0, 0, {}]
        return found

    def statements(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for ns, (unfinished, open_tasks, queues) in self.by_ns.items():
            queues = {q: n for q, n in queues.items() if n}
            if unfinished or open_tasks or queues:
                out.append((_ADD, {"ns": ns, "u": unfinished, "o": open_tasks, "q": json.dumps(queues)}))
        return out


_ADD = f"""
INSERT INTO workflow_quota_counts AS c (namespace_id, stripe, unfinished, open_tasks, open_by_queue)
VALUES (:ns, pg_backend_pid() % {STRIPES}, :u, :o, CAST(:q AS jsonb))
ON CONFLICT (namespace_id, stripe) DO UPDATE SET
    unfinished = c.unfinished + EXCLUDED.unfinished,
    open_tasks = c.open_tasks + EXCLUDED.open_tasks,
    open_by_queue = c.open_by_queue || COALESCE((
        SELECT jsonb_object_agg(d.key, COALESCE((c.open_by_queue ->> d.key)::bigint, 0) + d.value::bigint)
        FROM jsonb_each_text(EXCLUDED.open_by_queue) AS d), '{{}}'::jsonb)
"""


def _deltas(conn: Connection) -> _Deltas:
    return buffer(conn, "workflow_quota_counts", _Deltas)


def instance(conn: Connection, namespace_id: str, change: int) -> None:
    """An instance of ``namespace_id`` began (+1) or ended (-1) in this transaction."""
    _deltas(conn)._of(namespace_id)[0] += change


def task(conn: Connection, namespace_id: str, queue: str, change: int) -> None:
    """A task of ``queue`` opened (+1) or closed (-1) in this transaction."""
    counts = _deltas(conn)._of(namespace_id)
    counts[1] += change
    counts[2][queue] = counts[2].get(queue, 0) + change


# --------------------------------------------------------------------------- the check
_KEY = "lf-ns:"
# The figures of one start: the committed sums of the namespace (this transaction's own changes are not
# written before its commit) and, per queue of the definition, its open tasks minus its live claims (queue
# NULL when it has none); ``far``: every cap leaves room for every start that may be in flight, and then
# the namespace's start lock is taken in SHARE mode by the same statement.
_FIGURES = """
WITH u AS MATERIALIZED (
    SELECT COALESCE(sum(unfinished), 0) AS unfinished, COALESCE(sum(open_tasks), 0) AS open_tasks,
           current_setting('max_connections')::int AS flight
    FROM workflow_quota_counts WHERE namespace_id = :ns),
q AS MATERIALIZED (
    SELECT q.queue, q.n,
           COALESCE((SELECT sum((c.open_by_queue ->> q.queue)::bigint) FROM workflow_quota_counts c
                     WHERE c.namespace_id = :ns), 0)
           - (SELECT count(*) FROM workflow_tasks t
              WHERE t.namespace_id = :ns AND t.queue = q.queue AND t.state = 'CLAIMED'
                AND t.lease_expires_at > now()) AS pending
    FROM unnest(CAST(:queues AS text[])) WITH ORDINALITY AS q(queue, n)),
f AS MATERIALIZED (
    SELECT u.unfinished + u.flight < :instance_limit
       AND NOT EXISTS (SELECT 1 FROM q WHERE q.pending + u.flight * {tasks} >= :queue_limit)
       AND u.unfinished + u.open_tasks + u.flight * (1 + {tasks}) < :work_limit AS far
    FROM u)
SELECT q.queue, q.pending, u.unfinished, u.open_tasks, f.far,
       CASE WHEN f.far AND {lock} THEN pg_advisory_xact_lock_shared(hashtextextended(:k, 0))::text END AS locked
FROM u CROSS JOIN f LEFT JOIN q ON true
ORDER BY q.n
"""
_SHARED = text(_FIGURES.format(tasks=TASKS_PER_TRANSACTION, lock="true"))
_EXACT = text(_FIGURES.format(tasks=TASKS_PER_TRANSACTION, lock="false"))
_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))")


def check(conn: Connection, namespace_id: str, queues: list[str]) -> None:
    """The caps, checked LAST in the start's transaction, in order: unfinished instances (409
    WORKFLOW_INSTANCE_LIMIT), PENDING tasks per queue (429 QUEUE_FULL), unfinished work of the application =
    the credential's namespace (429 APPLICATION_FULL): unfinished instances plus open tasks. The start's
    own instance and tasks are not counted: the question is whether one more fits.

    Far from every cap: one statement reads the figures and takes the start lock in SHARE mode (starts go
    on in parallel; a start in flight is one the margin counted). Near a cap: the lock EXCLUSIVE (it waits
    for the starts in flight, which hold it SHARED until they commit), then the figures again in a statement
    of its own, whose snapshot shows every start committed before: exact."""
    params = {
        "ns": namespace_id,
        "queues": list(queues),
        "k": _KEY + namespace_id,
        "instance_limit": settings.INSTANCE_LIMIT.get(),
        "queue_limit": settings.QUEUE_PENDING_LIMIT.get(),
        "work_limit": settings.APPLICATION_WORK_LIMIT.get(),
    }
    rows = run(conn, _SHARED, params).all()
    if not rows[0].far:
        defer(conn, _LOCK, {"k": params["k"]})
        rows = run(conn, _EXACT, params).all()
    unfinished, open_tasks = rows[0].unfinished, rows[0].open_tasks
    if unfinished >= params["instance_limit"]:
        raise LimitExceeded(
            "WORKFLOW_INSTANCE_LIMIT",
            f"the namespace has {params['instance_limit']} unfinished workflow instances (the limit)",
        )
    retry_after = settings.QUOTA_RETRY_AFTER_SECONDS.get()
    for r in rows:
        if r.queue is not None and r.pending >= params["queue_limit"]:
            raise QuotaExceeded(
                "QUEUE_FULL",
                retry_after=retry_after,
                message=f"queue {r.queue!r} has {r.pending} pending tasks (the quota is "
                f"{params['queue_limit']}); retry later with the same Idempotency-Key",
            )
    if unfinished + open_tasks >= params["work_limit"]:
        raise QuotaExceeded(
            "APPLICATION_FULL",
            retry_after=retry_after,
            message=f"the application has {unfinished + open_tasks} units of unfinished work (unfinished "
            f"workflows plus open tasks; the quota is {params['work_limit']}); retry later with the same "
            "Idempotency-Key",
        )


# --------------------------------------------------------------------------- drift and repair
# The counts against the rows, per namespace (one statement, so one snapshot: a transaction's rows and its
# count changes commit together, and any difference is drift, not a race). Drift comes only from writes
# that bypass the engine's transitions: TRUNCATE, a hand-made UPDATE or DELETE of the rows.
_QUOTA_TRUTH = """
truth AS (
    SELECT namespace_id, 'unfinished' AS what, count(*) AS n FROM workflow_instances
    WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') GROUP BY namespace_id
    UNION ALL
    SELECT namespace_id, 'open_tasks', count(*) FROM workflow_tasks
    WHERE state IN ('PENDING', 'CLAIMED') GROUP BY namespace_id
    UNION ALL
    SELECT namespace_id, 'open:' || queue, count(*) FROM workflow_tasks
    WHERE state IN ('PENDING', 'CLAIMED') GROUP BY namespace_id, queue
)"""
_QUOTA_DRIFT = text(
    f"""
WITH {_QUOTA_TRUTH},
kept AS (
    SELECT namespace_id, 'unfinished' AS what, sum(unfinished) AS n FROM workflow_quota_counts GROUP BY namespace_id
    UNION ALL
    SELECT namespace_id, 'open_tasks', sum(open_tasks) FROM workflow_quota_counts GROUP BY namespace_id
    UNION ALL
    SELECT c.namespace_id, 'open:' || e.key, sum(e.value::bigint)
    FROM workflow_quota_counts c, jsonb_each_text(c.open_by_queue) AS e GROUP BY c.namespace_id, e.key
    HAVING sum(e.value::bigint) <> 0
)
SELECT COALESCE(t.namespace_id, k.namespace_id) AS namespace_id, COALESCE(t.what, k.what) AS what,
       COALESCE(k.n, 0) AS kept, COALESCE(t.n, 0) AS counted
FROM truth t FULL JOIN kept k ON k.namespace_id = t.namespace_id AND k.what = t.what
WHERE COALESCE(k.n, 0) <> COALESCE(t.n, 0)
ORDER BY 1, 2
LIMIT :limit
"""
)


def drift(conn: Connection, limit: int = 20) -> list[dict[str, Any]]:
    """Where ``workflow_quota_counts`` differs from the rows (``ledgerflow doctor``): at most ``limit``
    (namespace, figure, kept, counted) rows; none when the counters are right."""
    return [dict(r._mapping) for r in run(conn, _QUOTA_DRIFT, {"limit": limit})]


def repair(conn: Connection) -> int:
    """Recount every namespace's quota figures from the rows (``ledgerflow db repair-quota-counts``).
    Locks the instance and task tables against writers until ``conn``'s transaction ends (readers go
    on), so that no change commits between the recount and its counters. Returns the namespaces kept."""
    run(conn, "LOCK TABLE workflow_instances, workflow_tasks IN SHARE MODE")
    run(conn, "DELETE FROM workflow_quota_counts")
    return run(
        conn,
        f"""
WITH {_QUOTA_TRUTH}
INSERT INTO workflow_quota_counts (namespace_id, stripe, unfinished, open_tasks, open_by_queue)
SELECT namespace_id, 0,
       COALESCE(sum(n) FILTER (WHERE what = 'unfinished'), 0),
       COALESCE(sum(n) FILTER (WHERE what = 'open_tasks'), 0),
       COALESCE(jsonb_object_agg(substr(what, 6), n) FILTER (WHERE what LIKE 'open:%'), '{{}}'::jsonb)
FROM truth GROUP BY namespace_id
""",
    ).rowcount
