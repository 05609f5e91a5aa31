"""The executor's transitions: claim (pending -> running), settle (running -> *), the pool's
combined pass, lease renewal, the ownership lock and the side-effect marker. Every write is guarded
by generation + lease token + ``status = 'running'``, so a stale executor's write changes nothing.

An attempt row is written once (L-DATA-2): while a job runs, its open attempt lives on the job row
(``attempt_id`` drawn from the attempts' sequence at claim, ``worker_id``, ``attempt_started_at``;
the due time is the job's ``run_at``, which no move changes while the job runs). Whatever ends the
attempt (settle here, reclaim or a fencing move in ``interventions``) inserts the finished attempt
row and clears those columns in the same statement, so at every moment an attempt is either on the
job row (running) or in ``workflow_job_executions`` (final), never both and never neither."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import dict_row
from sqlalchemy import Connection

from app.ledger.models import ATTEMPT_STATUS_TYPE, JOB_STATUS_TYPE
from app.ledger.states import EXTERNAL_OUTCOME_UNKNOWN, WORKER_SHUTDOWN
from app.observability import logs
from app.settings import SLOTS
from app.sql import Query, column_names, query, run, run_raw

# Columns an executor needs; returned by claim (``created_at``: the time of the transaction that enqueued the
# job, the partition key of what that transaction wrote, e.g. an ``event_dispatch`` job's event batches).
_JOB_COLUMNS = """id, type, queue, payload, instance_id, task_id, step_key, priority, run_at, attempts,
    max_attempts, generation, lease_token, lease_until, execution_deadline, operation_key, trace_id,
    effect_marker, traceparent, attempt_id, created_at"""

# The open attempt's columns on the job row (see the module docstring): cleared by every move that ends
# the attempt, which inserts the attempt row with these columns.
ATTEMPT_ID_SEQUENCE = "workflow_job_executions_id_seq"
CLEAR_OPEN_ATTEMPT = "attempt_id = NULL, worker_id = NULL, attempt_started_at = NULL"
# What a move that ends an attempt reads of the job row (as ``j``) before it clears it.
OPEN_ATTEMPT = (
    "j.id, j.generation, j.attempts, j.attempt_id, j.worker_id, j.attempt_started_at, j.run_at, j.payload"
)


def insert_final_attempts(
    source: str, *, status: str, response: str, error: str, error_code: str, duration_ms: str
) -> str:
    """INSERT of the final attempt rows from ``source``, a FROM clause in which ``p`` holds the
    OPEN_ATTEMPT facts of each job whose attempt ends; the other arguments are SQL expressions
    (``status`` is cast to the attempts' enum type: a CASE of literals is text, which no enum takes)."""
    return f"""INSERT INTO workflow_job_executions (id, job_id, generation, attempt, status, worker_id, request,
        response, error, error_code, due_at, started_at, finished_at, duration_ms)
    SELECT p.attempt_id, p.id, p.generation, p.attempts, CAST({status} AS {ATTEMPT_STATUS_TYPE}),
           p.worker_id, p.payload, {response}, {error}, {error_code}, p.run_at, p.attempt_started_at,
           clock_timestamp(), {duration_ms}
    FROM {source}"""


# L-STATE-3 backoff: base * 2^(attempts-1), one delay capped.
BACKOFF_SQL = (
    "LEAST(CAST(:backoff_base AS float8) * power(2, GREATEST(j.attempts, 1) - 1), "
    "CAST(:backoff_cap AS float8)) * interval '1s'"
)


# --------------------------------------------------------------------------- claim: pending -> running


# psycopg converts a statement's placeholders once and caches the result only for statements shorter
# than this (psycopg._queries.MAX_CACHED_STATEMENT_LENGTH); a longer one is parsed again in Python at
# every execution (~0.2 ms per pool pass for the settle + claim statement).
PSYCOPG_CACHED_LENGTH = 4096


def _picked_sql(order: str, limit: int | None = None) -> str:
    """Rows of one claim: due ``pending`` jobs of ``:queue``, skipping locked ones (L-CLAIM-2).
    ``limit`` inlines the LIMIT (the raw statements are prepared once per limit value, so that their
    generic plan knows it); None binds ``:limit``."""
    return f"""picked AS (
    SELECT id FROM workflow_jobs
    WHERE queue = :queue AND status = 'pending' AND run_at <= now()
    ORDER BY {order}
    LIMIT {":limit" if limit is None else int(limit)}
    FOR UPDATE SKIP LOCKED
)"""


def _claimed_sql() -> str:
    """pending -> running for the picked rows, with their open attempt on the job row (a CTE after
    ``picked``). The rows are found by their ids as an array (an index condition on the primary key),
    not by a join with ``picked``: a generic plan made while the table was tiny (a new database, its
    first ANALYZE) costs both sides of such a join at one row and may put the whole table on the outer
    side, and the pool's prepared pass keeps that plan until the next ANALYZE: every pass then read the
    whole primary key (12.5 ms instead of 0.7 ms at 20,000 rows; seen as ~600 buffers per pass in
    ``bench.workflows``)."""
    return f"""claimed AS (
    UPDATE workflow_jobs j
    SET status = 'running',
        attempts = j.attempts + 1,
        lease_token = gen_random_uuid(),
        execution_deadline = now() + j.execution_timeout_ms * interval '1ms',
        lease_until = LEAST(now() + CAST(:lease_seconds AS float8) * interval '1s',
                            now() + j.execution_timeout_ms * interval '1ms'),
        attempt_id = nextval('{ATTEMPT_ID_SEQUENCE}'), worker_id = :worker_id, attempt_started_at = now(),
        updated_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING {", ".join("j." + c.strip() for c in _JOB_COLUMNS.split(","))}
)"""


def _claim_sql(order: str, limit: int | None = None) -> str:
    return f"""
WITH {_picked_sql(order, limit)}, {_claimed_sql()}
SELECT claimed.*, now() AS db_now
FROM claimed
ORDER BY claimed.priority, claimed.run_at, claimed.id
"""


CLAIM_BY_PRIORITY = query("job_claim_by_priority", _claim_sql("priority, run_at, id"))
CLAIM_BY_DUE = query("job_claim_by_due", _claim_sql("run_at, id"))


_BY_PRIORITY, _BY_DUE = "priority, run_at, id", "run_at, id"

# Session settings of a raw connection that runs the pool's statements (the pool loop's, and the
# benchmark's claim timing). The statements are prepared; PostgreSQL would re-plan them on every
# execution (custom plans: ~0.7 ms, a third of a pass), so the generic plan is forced. A generic
# plan is built once, possibly while the tables are small or their statistics stale (autovacuum
# off), so sequential scans are ruled out for this session: every access in these statements is an
# index lookup (claim index, primary keys, the partial "running" indexes) whatever the statistics.
PG_SESSION_SETTINGS = {"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off"}
PG_SESSION_OPTIONS = " ".join(f"-c {k}={v}" for k, v in PG_SESSION_SETTINGS.items())


def _prepare(conn: psycopg.Connection) -> bool | None:
    """Prepare the pool's statements, unless prepared statements are off on this connection
    (``prepare_threshold=None``: behind PgBouncer 1.18 in transaction mode, app.db.prepared_statements)."""
    return None if conn.prepare_threshold is None else True


# The pool's statements with their LIMIT inlined: one named statement per order and limit (a pool's limit
# is its slots, a handful of values), e.g. ``pool_claim_by_due_4``.
@lru_cache(maxsize=64)
def _pg_claim_query(by_due: bool, limit: int) -> Query:
    order = "by_due" if by_due else "by_priority"
    return query(f"pool_claim_{order}_{limit}", _claim_sql(_BY_DUE if by_due else _BY_PRIORITY, limit))


def _pg_claim_sql(by_due: bool, limit: int) -> str:
    return _pg_claim_query(by_due, limit).sql


def claim(
    conn: Connection | psycopg.Connection,
    *,
    queue: str,
    limit: int,
    worker_id: str,
    lease_seconds: float,
    by_due: bool,
) -> list[dict[str, Any]]:
    """pending -> running for up to ``limit`` due jobs of ``queue`` (SKIP LOCKED), each with its open
    attempt on the job row.

    ``conn`` is a SQLAlchemy connection, or a raw psycopg connection (then the statement is sent as a
    prepared statement; the caller owns the transaction either way)."""
    if limit <= 0:
        return []
    params = {"queue": queue, "limit": limit, "worker_id": worker_id, "lease_seconds": lease_seconds}
    if isinstance(conn, psycopg.Connection):
        with conn.cursor(row_factory=dict_row) as cur:
            return run_raw(cur, _pg_claim_query(by_due, limit), params, prepare=_prepare(conn)).fetchall()
    stmt = CLAIM_BY_DUE if by_due else CLAIM_BY_PRIORITY
    return [dict(r._mapping) for r in run(conn, stmt, params)]


# --------------------------------------------------------------------------- settle: running -> *
@dataclass(frozen=True)
class Settlement:
    """What one finished execution reports. ``kind`` is an Outcome kind (see outcome.py)."""

    job_id: int
    generation: int
    lease_token: str
    kind: str  # succeeded | skipped | retry | failed | dead
    result: Any = None
    error: str | None = None
    error_code: str | None = None
    duration_ms: int = 0
    job_type: str = ""  # for the settled-jobs metric only; never written
    # a retry waits at least this long (a receiver's Retry-After), but never past the backoff cap: L-STATE-3
    # caps a single delay (15 min by default)
    retry_after_s: float | None = None


# The settlements arrive as ONE json parameter (an array of objects, see ``_settle_params``), not as nine
# arrays: psycopg dumps a list parameter in Python, element by element, the largest single cost of the
# pool loop's own CPU per pass in profiles; ``json.dumps`` of the batch runs in C. Their ids come again as
# ``:ids`` (``j.id = ANY(:ids)`` where ``workflow_jobs`` is read): the planner estimates the JSON batch at 100
# rows and, with a few thousand kept jobs, hashed the whole table at every settle (a sequential scan per
# pool pass); given the ids it looks each one up by primary key, whatever the table keeps. (No comment
# inside the SQL: the pool's statement must stay within psycopg's conversion cache, 4096 bytes.)
# A failure while a side-effect marker is open, as ``last_error`` says it (then the handler's own error).
UNSAFE_FAILURE = "failed during an unsafe external call: outcome needs confirmation; "
_SETTLE_CTES = f"""input AS (
    SELECT * FROM json_to_recordset(CAST(:items AS json))
        AS u(id bigint, gen int, token uuid, kind text, result jsonb, error text, code text, duration_ms int,
             retry_after float8)
), prior AS (
    -- the open attempts being settled, as this statement's snapshot shows them: only a claim writes
    -- them, and a claim needs a new lease token, so where the guard below still holds they are exact
    SELECT {OPEN_ATTEMPT}
    FROM workflow_jobs j JOIN input u ON j.id = u.id AND j.generation = u.gen AND j.lease_token = u.token
    WHERE j.id = ANY(CAST(:ids AS bigint[]))
), settled AS (
    UPDATE workflow_jobs j
    -- A failure while a side-effect marker is open is an unknown external outcome whatever the
    -- handler reported (L-EFFECT-4): dead, marker kept, never retried automatically. The first
    -- literal states the enum type, which the CASE then has (a CASE of bare literals is text).
    SET status = CASE
            WHEN u.kind IN ('succeeded', 'skipped') THEN 'succeeded'::{JOB_STATUS_TYPE}
            WHEN j.effect_marker IS NOT NULL THEN 'dead'
            WHEN u.kind = 'failed' THEN 'failed'
            WHEN u.kind = 'retry' AND j.attempts < j.max_attempts THEN 'pending'
            ELSE 'dead' END,
        run_at = CASE WHEN u.kind = 'retry' AND j.attempts < j.max_attempts AND j.effect_marker IS NULL
                      THEN now() + GREATEST({BACKOFF_SQL}, LEAST(COALESCE(u.retry_after, 0),
                                    CAST(:backoff_cap AS float8)) * interval '1s')
                      ELSE j.run_at END,
        result = CASE WHEN u.kind IN ('succeeded', 'skipped') THEN u.result ELSE j.result END,
        last_error = CASE WHEN u.kind IN ('succeeded', 'skipped') THEN j.last_error
                          WHEN j.effect_marker IS NOT NULL AND u.code IS DISTINCT FROM :unknown
                          THEN :unsafe || coalesce(u.error, '')
                          ELSE u.error END,
        error_code = CASE WHEN u.kind IN ('succeeded', 'skipped') THEN NULL
                          WHEN j.effect_marker IS NOT NULL THEN :unknown
                          ELSE u.code END,
        effect_marker = CASE WHEN u.kind IN ('succeeded', 'skipped') THEN NULL ELSE j.effect_marker END,
        lease_token = NULL, lease_until = NULL, execution_deadline = NULL,
        {CLEAR_OPEN_ATTEMPT},
        finished_at = CASE WHEN u.kind = 'retry' AND j.attempts < j.max_attempts AND j.effect_marker IS NULL
                           THEN NULL ELSE now() END,
        updated_at = now()
    FROM input u
    -- The guard: generation + lease token of a running job. ``status = 'running'`` is implied by a
    -- non-null lease token (ck_workflow_jobs_running_has_lease) and deliberately not written: it
    -- would let the pool's generic plan read every running job through the partial running-lease
    -- index instead of looking the settled ids up by primary key (cost growing with jobs in flight).
    WHERE j.id = u.id AND j.generation = u.gen AND j.lease_token = u.token AND j.id = ANY(CAST(:ids AS bigint[]))
    RETURNING j.id, j.status, j.run_at, u.token
), closed AS (
    {
    insert_final_attempts(
        "settled s JOIN input u ON u.id = s.id AND u.token = s.token JOIN prior p ON p.id = s.id",
        status="CASE u.kind WHEN 'succeeded' THEN 'succeeded' WHEN 'skipped' THEN 'skipped' ELSE 'failed' END",
        response="u.result",
        error="u.error",
        error_code="u.code",
        duration_ms="u.duration_ms",
    )
}
)"""

_SETTLE = query("job_settle", f"WITH {_SETTLE_CTES}\nSELECT id, status FROM settled")


def settle(
    conn: Connection, items: Sequence[Settlement], *, backoff_base: float, backoff_cap: float
) -> dict[int, str]:
    """running -> succeeded | pending (backoff) | failed | dead, in one batched statement.

    Returns ``{job_id: new_status}`` for the items whose executor still owned the job; a stale
    executor's item is simply absent (its write changed nothing)."""
    if not items:
        return {}
    rows = run(conn, _SETTLE, _settle_params(items, backoff_base, backoff_cap))
    return {r.id: r.status for r in rows}


def _settle_params(items: Sequence[Settlement], backoff_base: float, backoff_cap: float) -> dict[str, Any]:
    """The statement's parameters: the batch as one JSON array (a JSON ``null`` result is SQL NULL, as
    a None result always was)."""
    batch = [
        {
            "id": i.job_id,
            "gen": i.generation,
            "token": i.lease_token,
            "kind": i.kind,
            "result": i.result,
            "error": i.error,
            "code": i.error_code,
            "duration_ms": i.duration_ms,
            "retry_after": i.retry_after_s,
        }
        for i in items
    ]
    return {
        # outcome_of makes a result JSON PostgreSQL takes (no NaN, no NUL) and a retry_after finite; what
        # PostgreSQL would still refuse fails the statement, which the pool retries, never the loop thread
        "items": json.dumps(batch),
        # the batch's ids as an array literal: one string for psycopg to send, not a list to dump
        "ids": "{" + ",".join(str(int(i.job_id)) for i in items) + "}",
        # texts passed as parameters, not written in the statement: it must stay within psycopg's cache
        "unknown": EXTERNAL_OUTCOME_UNKNOWN,
        "unsafe": UNSAFE_FAILURE,
        "backoff_base": backoff_base,
        "backoff_cap": backoff_cap,
    }


# --------------------------------------------------------------------------- the pool's pass: settle + claim
def _settle_and_claim_sql(order: str, limit: int) -> str:
    # One statement = one transaction (autocommit) = one round trip: the settle CTEs and the claim
    # CTEs are exactly those of settle() and claim(). They touch disjoint rows (settle: this
    # executor's ``running`` jobs; claim: ``pending`` ones), and all CTEs see one snapshot, so a job
    # settled back to ``pending`` (retry with backoff) is not re-claimed by the same pass.
    #
    # ``next_due_in``: seconds until the earliest pending job of the queue that is not due yet (a timer,
    # a backoff, a deadline), read through the due-order claim index in the statement's snapshot, or one
    # this pass just settled back to pending with a backoff (the snapshot does not show that write); the
    # pool sleeps until then instead of a whole short poll, so delayed work starts on time. NULL: none.
    return f"""
WITH {_SETTLE_CTES}, {_picked_sql(order, limit)}, {_claimed_sql()}
SELECT s.settled_ids, s.settled_statuses, LEAST(s.retry_at, (SELECT min(run_at) FROM workflow_jobs
    WHERE queue = :queue AND status = 'pending' AND run_at > now())) - now() AS next_due_in, c.*
FROM (SELECT array_agg(id) AS settled_ids, array_agg(status::text) AS settled_statuses,
      min(run_at) FILTER (WHERE status = 'pending') AS retry_at FROM settled) s
LEFT JOIN (SELECT claimed.*, now() AS db_now FROM claimed) c ON true
ORDER BY c.priority, c.run_at, c.id
"""


@lru_cache(maxsize=64)
def _pg_settle_and_claim_query(by_due: bool, limit: int) -> Query:
    order = "by_due" if by_due else "by_priority"
    sql = _settle_and_claim_sql(_BY_DUE if by_due else _BY_PRIORITY, limit)
    return query(f"pool_settle_and_claim_{order}_{limit}", sql)


def _pg_settle_and_claim_sql(by_due: bool, limit: int) -> str:
    return _pg_settle_and_claim_query(by_due, limit).sql


# The pool's statements of a process with the default slots (``LEDGERFLOW_SLOTS``: a pass claims up to its
# free slots), named at import like every other statement, so that docs/statements.sql writes them out;
# another slot count names its own at its first pass.
for _by_due in (False, True):
    for _limit in range(SLOTS.default + 1):
        _pg_settle_and_claim_query(_by_due, _limit)
        if _limit:
            _pg_claim_query(_by_due, _limit)


class Pass(NamedTuple):
    """What one pool pass did and learned."""

    settled: dict[int, str]  # job id -> new status, for the settlements that still owned their job
    claimed: list[dict[str, Any]]
    next_due_in: float | None  # seconds until the queue's next pending job is due (None: none waits)


def settle_and_claim(
    conn: psycopg.Connection,
    items: Sequence[Settlement],
    *,
    queue: str,
    limit: int,
    worker_id: str,
    lease_seconds: float,
    by_due: bool,
    backoff_base: float,
    backoff_cap: float,
) -> Pass:
    """settle(items) and claim(limit) in ONE prepared statement on a raw psycopg connection in
    autocommit mode (see PG_SESSION_OPTIONS), i.e. one transaction and one round trip per pool pass.

    Returns the ``Pass``: ``{job_id: new_status}`` of the settlements that still owned their job, the
    claimed jobs, and the seconds until the queue's next pending job falls due; the guards are those of
    settle() and claim()."""
    params = _settle_params(items, backoff_base, backoff_cap)
    params.update(queue=queue, worker_id=worker_id, lease_seconds=lease_seconds)
    q = _pg_settle_and_claim_query(by_due, max(0, limit))
    with conn.cursor() as cur:
        tuples = run_raw(cur, q, params, prepare=_prepare(conn)).fetchall()
        names = column_names(q.sql, cur)
    rows = [dict(zip(names, t, strict=True)) for t in tuples]
    first = rows[0]
    ids, statuses = first.pop("settled_ids"), first.pop("settled_statuses")
    due = first.pop("next_due_in")  # an interval
    next_due_in = None if due is None else due.total_seconds()
    settled = dict(zip(ids, statuses, strict=True)) if ids else {}
    if first["id"] is None:  # nothing claimed: the one row only carries the settlements
        return Pass(settled, [], next_due_in)
    for r in rows[1:]:
        del r["settled_ids"], r["settled_statuses"], r["next_due_in"]
    return Pass(settled, rows, next_due_in)


# --------------------------------------------------------------------------- lease renewal (no status change)
_RENEW = query(
    "job_renew_leases",
    """
UPDATE workflow_jobs j
SET lease_until = LEAST(now() + CAST(:lease_seconds AS double precision) * interval '1 second',
                        j.execution_deadline),
    updated_at = now()
FROM unnest(CAST(:ids AS bigint[]), CAST(:gens AS int[]), CAST(:tokens AS uuid[])) AS u(id, gen, token)
WHERE j.id = u.id AND j.generation = u.gen AND j.lease_token = u.token AND j.status = 'running'
  AND j.execution_deadline > now()
RETURNING j.id
""",
)


def renew_leases(
    conn: Connection, owned: Sequence[tuple[int, int, str]], *, lease_seconds: float
) -> set[int]:
    """Extend the leases still owned (never past the execution deadline). Returns the ids renewed;
    the others have lost ownership or passed their deadline and must be aborted."""
    if not owned:
        return set()
    rows = run(
        conn,
        _RENEW,
        {
            "ids": [o[0] for o in owned],
            "gens": [o[1] for o in owned],
            "tokens": [o[2] for o in owned],
            "lease_seconds": lease_seconds,
        },
    )
    return {r.id for r in rows}


# --------------------------------------------------------------------------- hand back at shutdown: running -> pending
# The executor gives its jobs back because its worker is shutting down (SIGTERM): not the handler's
# failure, so no backoff (due again at once) and the attempt does not use the budget (``max_attempts``
# grows by one: ``attempts`` still counts every claim, L-STATE-2). The attempt is recorded as
# ``canceled`` with WORKER_SHUTDOWN. An open side-effect marker is an unknown external outcome, as
# everywhere else (L-EFFECT-4): dead, marker kept, never re-sent automatically.
_HAND_BACK = query(
    "job_hand_back",
    f"""
WITH input AS (
    SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:gens AS int[]), CAST(:tokens AS uuid[])) AS u(id, gen, token)
), prior AS (
    SELECT {OPEN_ATTEMPT} FROM workflow_jobs j JOIN input u
        ON j.id = u.id AND j.generation = u.gen AND j.lease_token = u.token
    WHERE j.status = 'running'
    FOR UPDATE OF j
), moved AS (
    UPDATE workflow_jobs j
    SET status = CAST(CASE WHEN j.effect_marker IS NOT NULL THEN 'dead' ELSE 'pending' END AS {
        JOB_STATUS_TYPE
    }),
        run_at = CASE WHEN j.effect_marker IS NOT NULL THEN j.run_at ELSE now() END,
        max_attempts = CASE WHEN j.effect_marker IS NOT NULL THEN j.max_attempts ELSE j.max_attempts + 1 END,
        error_code = CASE WHEN j.effect_marker IS NOT NULL THEN '{EXTERNAL_OUTCOME_UNKNOWN}'
                          ELSE '{WORKER_SHUTDOWN}' END,
        last_error = CASE WHEN j.effect_marker IS NOT NULL
                          THEN 'worker shut down during an unsafe external call: outcome needs confirmation'
                          ELSE 'interrupted by worker shutdown' END,
        finished_at = CASE WHEN j.effect_marker IS NOT NULL THEN now() ELSE NULL END,
        lease_token = NULL, lease_until = NULL, execution_deadline = NULL, {CLEAR_OPEN_ATTEMPT},
        updated_at = now()
    FROM prior WHERE j.id = prior.id
    RETURNING j.id, j.status, j.error_code, j.last_error, j.queue
), closed AS (
    {
        insert_final_attempts(
            "prior p JOIN moved m ON m.id = p.id",
            status="CASE m.status WHEN 'dead' THEN 'failed' ELSE 'canceled' END",
            response="NULL",
            error="m.last_error",
            error_code="m.error_code",
            duration_ms="(extract(epoch FROM clock_timestamp() - p.attempt_started_at) * 1000)::int",
        )
    }
)
SELECT id, status, queue FROM moved
""",
)


def hand_back(conn: Connection, owned: Sequence[tuple[int, int, str]]) -> list[dict[str, Any]]:
    """running -> pending, due at once (or dead with an open side-effect marker), for the jobs this
    executor still owns (``(id, generation, lease_token)``): its worker is shutting down. Returns the
    moved jobs (``id``, ``status``, ``queue``); a job settled or fenced meanwhile is simply absent."""
    if not owned:
        return []
    rows = run(
        conn,
        _HAND_BACK,
        {"ids": [o[0] for o in owned], "gens": [o[1] for o in owned], "tokens": [o[2] for o in owned]},
    )
    return [dict(r._mapping) for r in rows]


# --------------------------------------------------------------------------- ownership check (executor)
# The fence of a job's business transaction: the job row locked while its executor still owns it (the
# generation and lease token of its claim, still running), with the seconds its execution deadline has left
# by database time (``lock_owned``; an engine job's instance lock takes it in the same statement, after the
# instance's row: ``app.engine.row_access.lock_instance_fencing``). The status is compared as text so that
# the job is found by its primary key whatever the statistics: a generic plan made when few jobs ran read it
# through ``ix_workflow_jobs_status_type`` (every running job, filtered by id;
# tests/db/test_open_tasks_plans.py).
JOB_FENCE_SQL = """SELECT EXTRACT(EPOCH FROM j.execution_deadline - clock_timestamp()) FROM workflow_jobs j
WHERE j.id = :job_id AND j.generation = :gen AND j.lease_token = :token AND j.status::text = 'running'"""
_LOCK_OWNED = query("job_lock_owned", f"{JOB_FENCE_SQL}\nFOR UPDATE")


def seconds_left(remaining: Any) -> float | None:
    """The fence's answer: the seconds left before the execution deadline, None when the executor no
    longer owns the job (no row) or the deadline passed."""
    if remaining is None or remaining <= 0:
        return None
    return float(remaining)


def lock_owned(conn: Connection, job_id: int, generation: int, lease_token: str) -> float | None:
    """Lock the job row if this executor still owns it and is within its deadline: the seconds left
    until that deadline by database time, as the statement ran (None: not owned, or past it)."""
    return seconds_left(
        run(conn, _LOCK_OWNED, {"job_id": job_id, "gen": generation, "token": lease_token}).scalar()
    )


_SET_MARKER = query(
    "job_set_effect_marker",
    """
UPDATE workflow_jobs SET effect_marker = CAST(:marker AS jsonb), updated_at = now()
WHERE id = :id AND generation = :gen AND lease_token = :token AND status = 'running'
  AND execution_deadline > clock_timestamp()
RETURNING id
""",
)


def _redacted(marker: dict[str, Any]) -> dict[str, Any]:
    """A marker never stores credentials (a URL's user:password, ``?token=``)."""
    return {k: logs.redact(v) if isinstance(v, str) else v for k, v in marker.items()}


def set_effect_marker(
    conn: Connection, job_id: int, generation: int, lease_token: str, marker: dict[str, Any] | None
) -> bool:
    """Record (or clear, with None) the side-effect marker of an unsafe external call (L-EFFECT-4)."""
    row = run(
        conn,
        _SET_MARKER,
        {
            "id": job_id,
            "gen": generation,
            "token": lease_token,
            "marker": None if marker is None else json.dumps(_redacted(marker)),
        },
    ).first()
    return row is not None
