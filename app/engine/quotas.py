"""The namespace quotas of new work (SPEC W-START-8, W-ERR 429 QUEUE_FULL / APPLICATION_FULL), without a
row that every start or task change must update and without serializing a namespace's starts.

**The count of instances.** ``workflow_quota_counts`` holds, per namespace and stripe (the committing
backend's pid modulo 64, so concurrent commits touch different rows), the unfinished instances. An
instance's start and end report their change (``instance``) to the transaction's buffer, which writes it
with ONE statement at commit. Nothing else writes these rows: a task's creation, claim or close writes
no quota row.

**The tasks are counted where they are.** The open (PENDING or CLAIMED) tasks of a namespace, and of each
queue, are counted by the check from ``ix_workflow_tasks_claim`` (the claim path's partial index: open
tasks only, by namespace and queue), each count bounded by what its cap needs (``LIMIT``), and a queue's
only when the namespace's are enough to fill it: the work of a count grows with the namespace's open
tasks up to its cap, never past it. From ``COUNT_EVERY_START_BELOW`` open tasks on, a process reuses a
count one of its starts made for ``KNOWN_SECONDS`` instead of counting at every start (far from the caps
only: near one the check counts exactly, see below). A queue's PENDING tasks are
its open tasks minus its live claims (``ix_workflow_tasks_claimed_lease``: claimed tasks only, the work
in flight). The start's own tasks, already inserted when the check runs, are left out.

**The check** (``check``, last in a start's transaction). Far from every cap, a start takes the
namespace's start lock in SHARE mode, in the statement that reads its figures: starts run and commit in
parallel. Near a cap it takes it EXCLUSIVE, which waits for the starts in flight and keeps new ones out
until it commits, and reads the figures again: exact. "Far" leaves room for every start that may be in
flight: at most one per server connection (``max_connections``), each with at most
``TASKS_PER_TRANSACTION`` tasks. A start's rows and its instance count commit together, so the figures
of a statement (one snapshot) show every committed start whole and no start in flight at all, whether
they come from the count rows or from the task rows. Under either lock a start never ends above a cap."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection

from app import settings
from app.engine import commit_batch
from app.engine.states import task_open_sql, unfinished_sql
from app.errors import LimitExceeded, QuotaExceeded
from app.sql import query, run

# the most tasks one engine transaction opens: every step of a definition (128) activated at once, and as
# many compensation tasks
TASKS_PER_TRANSACTION = 256


# --------------------------------------------------------------------------- the instance count
def instance(conn: Connection, namespace_id: str, change: int) -> None:
    """An instance of ``namespace_id`` began (+1) or ended (-1) in this transaction: written at its commit
    (``app.engine.commit_batch``)."""
    counts = commit_batch.of(conn).unfinished
    counts[namespace_id] = counts.get(namespace_id, 0) + change


# --------------------------------------------------------------------------- the check
_KEY = "lf-ns:"
_OPEN = "state IN ('PENDING', 'CLAIMED')"  # the predicate of ix_workflow_tasks_claim, word for word
# The figures of one start: the committed unfinished instances of the namespace (this transaction's own
# change is not written before its commit), its open tasks and, per queue of the definition, its PENDING
# tasks (open minus live claims; queue NULL when it has none), the start's own tasks left out. Each count
# stops where its cap is reached (a figure at its cap is refused whatever lies past it). A queue's tasks
# are not counted when the namespace's, counted whole (``whole``: below their bound), are too few to
# reach the queue's cap (with the margin of the starts in flight in the SHARED statement): no queue holds
# more than its namespace, and ``pending`` is then 0, which decides nothing. ``far``: every cap leaves
# room for every start that may be in flight, and then the namespace's start lock is taken in SHARE mode
# by the same statement.
_FIGURES = """
WITH u AS MATERIALIZED (
    SELECT COALESCE(sum(unfinished), 0) AS unfinished, current_setting('max_connections')::int AS flight
    FROM workflow_quota_counts WHERE namespace_id = :ns),
own AS MATERIALIZED (
    -- the start's own open tasks, by its instance's index (app.engine.row_access._OPEN_WORK)
    SELECT queue, count(*) AS n FROM workflow_tasks WHERE instance_id = :own
      AND {open_task} GROUP BY queue),
o AS MATERIALIZED (
    SELECT COALESCE(CAST(:known AS bigint), c.n - w.own) AS open_tasks,
           CAST(:known AS bigint) IS NOT NULL OR c.n < w.bound AS whole
    FROM (SELECT GREATEST(:work_limit - (SELECT unfinished FROM u), 0) + s.own AS bound, s.own
          FROM (SELECT COALESCE(sum(n), 0) AS own FROM own) s) w
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM workflow_tasks WHERE namespace_id = :ns AND {open}
            LIMIT CASE WHEN CAST(:known AS bigint) IS NULL THEN w.bound ELSE 0 END) x) c),
q AS MATERIALIZED (
    SELECT q.queue, q.n,
           CASE WHEN o.whole AND o.open_tasks + {margin} < :queue_limit THEN 0 ELSE (
               SELECT c.open - c.live - COALESCE(own.n, 0) FROM (
                   SELECT l.live, (
                       SELECT count(*) FROM (
                           SELECT 1 FROM workflow_tasks t WHERE t.namespace_id = :ns AND t.queue = q.queue
                           AND t.{open} LIMIT :queue_limit + l.live + COALESCE(own.n, 0)) x) AS open
                   FROM (SELECT count(*) AS live FROM workflow_tasks t
                         WHERE t.namespace_id = :ns AND t.queue = q.queue AND t.state = 'CLAIMED'
                         AND t.lease_expires_at > now()) l) c)
           END AS pending
    -- the definition's queues, estimated at one row (migration 0037: ``unnest`` of a parameter is ten,
    -- which priced the generic plan at ten queues' counts and had this statement planned at every start)
    FROM workflow_queue_list(CAST(:queues AS text[])) WITH ORDINALITY AS q(queue, n)
    LEFT JOIN own ON own.queue = q.queue CROSS JOIN o CROSS JOIN u),
f AS MATERIALIZED (
    SELECT u.unfinished + u.flight < :instance_limit
       AND NOT EXISTS (SELECT 1 FROM q WHERE q.pending + u.flight * {tasks} >= :queue_limit)
       AND u.unfinished + o.open_tasks + u.flight * (1 + {tasks}) < :work_limit AS far
    FROM u CROSS JOIN o)
SELECT q.queue, q.pending, u.unfinished, o.open_tasks, o.whole, f.far,
       CASE WHEN f.far AND {lock} THEN pg_advisory_xact_lock_shared(hashtextextended(:k, 0))::text END AS locked
FROM u CROSS JOIN o CROSS JOIN f LEFT JOIN q ON true
ORDER BY q.n
"""
_SHARED = query(
    "quota_figures_shared",
    _FIGURES.format(
        tasks=TASKS_PER_TRANSACTION,
        open=_OPEN,
        open_task=task_open_sql(),
        margin=f"u.flight * {TASKS_PER_TRANSACTION}",
        lock="true",
    ),
)
_EXACT = query(
    "quota_figures_exact",
    _FIGURES.format(
        tasks=TASKS_PER_TRANSACTION, open=_OPEN, open_task=task_open_sql(), margin="0", lock="false"
    ),
)
_LOCK = query("quota_start_lock", "SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))")


# A namespace with many open tasks is not counted again by every start: the count is work that grows with
# the backlog (~0.25 µs per open task, 25 ms at 100,000), paid by the database every tenant shares. Below
# COUNT_EVERY_START_BELOW open tasks every start counts them (bounded work); from there on a process reuses
# the count one of its starts made for KNOWN_SECONDS (far from the caps only: a start near a cap counts
# exactly under the EXCLUSIVE lock, whatever is known). What the figure can miss is the tasks opened in
# that second, by the starts in flight (inside the margin) and by the steps that completions opened.
# 256: below it a count is about the work of one simple statement (~0.06 ms); it was 2,000 (up to ~0.5 ms
# per start: PostgreSQL's CPU per start in `bench.starts`, whose backlog grows past 2,000, went 3.95 / 4.01
# -> 3.37 / 3.65 ms when lowered).
COUNT_EVERY_START_BELOW = 256
KNOWN_SECONDS = 1.0
_KNOWN_MAX = 1_024  # namespaces remembered per process
_known: dict[str, tuple[int, float]] = {}  # namespace_id -> (open tasks, when counted: _clock())
_clock = time.monotonic


def _known_open_tasks(namespace_id: str) -> int | None:
    """The namespace's open tasks as this process counted them less than KNOWN_SECONDS ago, or None."""
    entry = _known.get(namespace_id)
    if entry is None or _clock() - entry[1] >= KNOWN_SECONDS:
        return None
    return entry[0]


def _remember_open_tasks(namespace_id: str, open_tasks: int) -> None:
    if open_tasks < COUNT_EVERY_START_BELOW:
        _known.pop(namespace_id, None)
        return
    if len(_known) >= _KNOWN_MAX and namespace_id not in _known:
        _known.pop(next(iter(_known)))  # the oldest remembered first
    _known[namespace_id] = (open_tasks, _clock())


def check(conn: Connection, namespace_id: str, instance_id: str, queues: list[str]) -> None:
    """The caps, checked LAST in the start's transaction, in order: unfinished instances (409
    WORKFLOW_INSTANCE_LIMIT), PENDING tasks per queue (429 QUEUE_FULL), unfinished work of the application =
    the credential's namespace (429 APPLICATION_FULL): unfinished instances plus open tasks. The start's
    own instance (``instance_id``) and tasks are not counted: the question is whether one more fits.

    Far from every cap: one statement reads the figures and takes the start lock in SHARE mode (starts go
    on in parallel; a start in flight is one the margin counted). Near a cap: the lock EXCLUSIVE (it waits
    for the starts in flight, which hold it SHARED until they commit), then the figures again in a statement
    of its own, whose snapshot shows every start committed before: exact."""
    params = {
        "ns": namespace_id,
        "own": instance_id,
        "queues": list(queues),
        "k": _KEY + namespace_id,
        "instance_limit": settings.INSTANCE_LIMIT.get(),
        "queue_limit": settings.QUEUE_PENDING_LIMIT.get(),
        "work_limit": settings.APPLICATION_WORK_LIMIT.get(),
    }
    known = _known_open_tasks(namespace_id)
    rows = run(conn, _SHARED, {**params, "known": known}).all()
    if not rows[0].far:
        run(conn, _LOCK, {"k": params["k"]})
        rows = run(conn, _EXACT, {**params, "known": None}).all()
    elif known is None and rows[0].whole:
        _remember_open_tasks(namespace_id, int(rows[0].open_tasks))
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
                message=f"queue {r.queue!r} has at least {r.pending} pending tasks (the quota is "
                f"{params['queue_limit']}); retry later with the same Idempotency-Key",
            )
    if unfinished + open_tasks >= params["work_limit"]:
        raise QuotaExceeded(
            "APPLICATION_FULL",
            retry_after=retry_after,
            message=f"the application has at least {unfinished + open_tasks} units of unfinished work (unfinished "
            f"workflows plus open tasks; the quota is {params['work_limit']}); retry later with the same "
            "Idempotency-Key",
        )


# --------------------------------------------------------------------------- drift and repair
# The count against the rows, per namespace (one statement, so one snapshot: a transaction's rows and its
# count change commit together, and any difference is drift, not a race). Drift comes only from writes
# that bypass the engine's transitions: TRUNCATE, a hand-made UPDATE or DELETE of the rows. The tasks
# have no count to drift: the check counts their rows.
_QUOTA_TRUTH = f"""
truth AS (
    SELECT i.namespace_id, count(*) AS n FROM workflow_instances i
    WHERE {unfinished_sql("i")} GROUP BY i.namespace_id
)"""
_QUOTA_DRIFT = query(
    "quota_drift",
    f"""
WITH {_QUOTA_TRUTH},
kept AS (SELECT namespace_id, sum(unfinished) AS n FROM workflow_quota_counts GROUP BY namespace_id)
SELECT COALESCE(t.namespace_id, k.namespace_id) AS namespace_id, 'unfinished' AS what,
       COALESCE(k.n, 0) AS kept, COALESCE(t.n, 0) AS counted
FROM truth t FULL JOIN kept k ON k.namespace_id = t.namespace_id
WHERE COALESCE(k.n, 0) <> COALESCE(t.n, 0)
ORDER BY 1
LIMIT :limit
""",
)


def drift(conn: Connection, limit: int = 20) -> list[dict[str, Any]]:
    """Where ``workflow_quota_counts`` differs from the rows (``ledgerflow doctor``): at most ``limit``
    (namespace, figure, kept, counted) rows; none when the counters are right."""
    return [dict(r._mapping) for r in run(conn, _QUOTA_DRIFT, {"limit": limit})]


_QUOTA_REPAIR_LOCK = query(
    "quota_repair_lock",
    "LOCK TABLE workflow_instances IN SHARE MODE",
)


_QUOTA_COUNTS_CLEAR = query(
    "quota_counts_clear",
    "DELETE FROM workflow_quota_counts",
)


_QUOTA_COUNTS_REBUILD = query(
    "quota_counts_rebuild",
    f"""
WITH {_QUOTA_TRUTH}
INSERT INTO workflow_quota_counts (namespace_id, stripe, unfinished) SELECT namespace_id, 0, n FROM truth
""",
)


def repair(conn: Connection) -> int:
    """Recount every namespace's unfinished instances from the rows (``ledgerflow db repair-quota-counts``).
    Locks the instance table against writers until ``conn``'s transaction ends (readers go on), so that
    no change commits between the recount and its counters. Returns the namespaces kept."""
    run(conn, _QUOTA_REPAIR_LOCK)
    run(conn, _QUOTA_COUNTS_CLEAR)
    return run(
        conn,
        _QUOTA_COUNTS_REBUILD,
    ).rowcount
