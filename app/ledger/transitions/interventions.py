"""Moves made *to* a job by someone other than its executor: the drain's reclaim of expired leases
(running -> pending | dead) and the fencing moves that bump ``generation`` (suspend, resume, clear,
operator cancel, manual retry). A fenced executor's later writes match no row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from app import jsonx
from app.ledger.models import JOB_QUEUE_TYPE, JOB_STATUS_TYPE, JOB_TYPE_TYPE
from app.ledger.states import (
    CANCELED_BY_OPERATOR,
    DEADLINE_EXCEEDED,
    EXTERNAL_OUTCOME_UNKNOWN,
    LEASE_EXPIRED,
)
from app.ledger.transitions.executor import (
    BACKOFF_SQL,
    CLEAR_OPEN_ATTEMPT,
    OPEN_ATTEMPT,
    insert_final_attempts,
)
from app.sql import query, run


def _close_open_attempts(prior_cte: str, moved_cte: str, status: str, error: str, error_code: str) -> str:
    """A CTE ``closed`` inserting the final attempt row of each moved job that had an open attempt,
    from the OPEN_ATTEMPT facts ``prior_cte`` read under the row lock before ``moved_cte`` cleared them."""
    insert = insert_final_attempts(
        f"{prior_cte} p JOIN {moved_cte} m ON m.id = p.id WHERE p.attempt_id IS NOT NULL",
        status=f"'{status}'",
        response="NULL",
        error=error,
        error_code=error_code,
        duration_ms="(extract(epoch FROM clock_timestamp() - p.attempt_started_at) * 1000)::int",
    )
    return f"\n, closed AS (\n    {insert}\n)"


# --------------------------------------------------------------------------- drain reclaim: running -> pending | dead
# The move itself, after a CTE ``stale`` that picked and locked the jobs (running -> pending | dead).
_RECLAIM_MOVE = f"""
), reclaimed AS (
    UPDATE workflow_jobs j
    SET status = CAST(CASE WHEN j.effect_marker IS NOT NULL THEN 'dead'
                           WHEN j.attempts >= j.max_attempts THEN 'dead'
                           ELSE 'pending' END AS {JOB_STATUS_TYPE}),
        error_code = CASE WHEN j.effect_marker IS NOT NULL THEN '{EXTERNAL_OUTCOME_UNKNOWN}'
                          WHEN j.execution_deadline <= now() THEN '{DEADLINE_EXCEEDED}'
                          ELSE '{LEASE_EXPIRED}' END,
        last_error = CASE WHEN j.effect_marker IS NOT NULL
                          THEN 'executor lost during an unsafe external call: outcome needs confirmation'
                          WHEN j.execution_deadline <= now() THEN 'execution deadline passed'
                          ELSE 'lease expired: executor lost' END,
        -- a lost lease is not the handler's failure: due again at once (the attempt still counts);
        -- a passed execution deadline is, and waits for the backoff (L-STATE-3)
        run_at = CASE WHEN j.effect_marker IS NOT NULL OR j.attempts >= j.max_attempts THEN j.run_at
                      WHEN j.execution_deadline <= now() THEN now() + {BACKOFF_SQL}
                      ELSE now() END,
        finished_at = CASE WHEN j.effect_marker IS NULL AND j.attempts < j.max_attempts
                           THEN NULL ELSE now() END,
        lease_token = NULL, lease_until = NULL, execution_deadline = NULL, {CLEAR_OPEN_ATTEMPT},
        updated_at = now()
    FROM stale WHERE j.id = stale.id
    RETURNING j.id, j.status, j.error_code, j.last_error, j.queue
){_close_open_attempts("stale", "reclaimed", "failed", "m.last_error", "m.error_code")}
SELECT id, status, error_code, queue FROM reclaimed
"""
_RECLAIM = query(
    "job_reclaim_expired",
    f"""
WITH stale AS (
    SELECT {OPEN_ATTEMPT} FROM workflow_jobs j
    WHERE j.status = 'running'
      AND (j.lease_until IS NULL OR j.lease_until <= now() OR j.execution_deadline <= now())
      AND (CAST(:queue AS {JOB_QUEUE_TYPE}) IS NULL OR j.queue = CAST(:queue AS {JOB_QUEUE_TYPE}))
    ORDER BY j.lease_until NULLS FIRST
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
"""
    + _RECLAIM_MOVE,
)
# A lost node's running jobs (its open attempt names it), whatever their lease says; refused while
# the node is live (an active heartbeat within 90 s, as the runtime status counts it).
_RECLAIM_NODE = query(
    "job_reclaim_lost_node",
    f"""
WITH stale AS (
    SELECT {OPEN_ATTEMPT} FROM workflow_jobs j
    WHERE j.status = 'running' AND j.worker_id = :node_id
      AND NOT EXISTS (SELECT 1 FROM workflow_worker_nodes n WHERE n.node_id = :node_id AND n.status = 'active'
                      AND n.heartbeat_at >= now() - interval '90 seconds')
    ORDER BY j.id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
"""
    + _RECLAIM_MOVE,
)


def reclaim_expired(
    conn: Connection, *, limit: int, backoff_base: float, backoff_cap: float, queue: str | None = None
) -> list[dict[str, Any]]:
    """running with a lost lease or a passed execution deadline -> pending (or dead: budget used up,
    or an open side-effect marker). Run by the drain for every queue and by each pool for its own
    queue (``queue``) every few seconds; SKIP LOCKED, so the two never wait on each other."""
    rows = run(
        conn,
        _RECLAIM,
        {"limit": limit, "backoff_base": backoff_base, "backoff_cap": backoff_cap, "queue": queue},
    )
    return [dict(r._mapping) for r in rows]


def reclaim_lost_node(
    conn: Connection, node_id: str, *, limit: int, backoff_base: float, backoff_cap: float
) -> list[dict[str, Any]]:
    """Directed recovery: the running jobs of a lost worker node, moved like an expired lease (pending
    and due at once, or dead when out of attempts or an unsafe external call was open), before their
    leases run out. Nothing moves while the node is live."""
    rows = run(
        conn,
        _RECLAIM_NODE,
        {"node_id": node_id, "limit": limit, "backoff_base": backoff_base, "backoff_cap": backoff_cap},
    )
    return [dict(r._mapping) for r in rows]


# --------------------------------------------------------------------------- fencing moves (generation + 1)
_SUSPEND = query(
    "job_suspend_instance",
    f"""
WITH prior AS (
    SELECT {OPEN_ATTEMPT}, j.status FROM workflow_jobs j
    WHERE j.instance_id = :instance_id AND j.type = ANY(CAST(:types AS {JOB_TYPE_TYPE}[]))
      AND j.status IN ('pending', 'running')
    FOR UPDATE
), moved AS (
    UPDATE workflow_jobs j
    SET status = CAST(CASE WHEN j.status = 'running' AND j.effect_marker IS NOT NULL THEN 'dead' ELSE 'paused' END
                      AS {JOB_STATUS_TYPE}),
        remaining_ms = CASE WHEN j.status = 'running' AND j.effect_marker IS NOT NULL THEN NULL
                            WHEN j.status = 'running' THEN 0
                            ELSE GREATEST(0, (extract(epoch FROM j.run_at - now()) * 1000))::bigint END,
        error_code = CASE WHEN j.status = 'running' AND j.effect_marker IS NOT NULL
                          THEN '{EXTERNAL_OUTCOME_UNKNOWN}' ELSE j.error_code END,
        last_error = CASE WHEN j.status = 'running' AND j.effect_marker IS NOT NULL
                          THEN 'instance suspended during an unsafe external call: outcome needs confirmation'
                          ELSE j.last_error END,
        finished_at = CASE WHEN j.status = 'running' AND j.effect_marker IS NOT NULL THEN now()
                           ELSE j.finished_at END,
        generation = j.generation + 1,
        lease_token = NULL, lease_until = NULL, execution_deadline = NULL, {CLEAR_OPEN_ATTEMPT},
        updated_at = now()
    FROM prior WHERE j.id = prior.id
    RETURNING j.id, j.status
){_close_open_attempts("prior", "moved", "canceled", "'instance suspended'", "NULL")}
SELECT id, status FROM moved
""",
)


def suspend_instance(conn: Connection, instance_id: str, types: Sequence[str]) -> list[dict[str, Any]]:
    """pending|running -> paused (remaining ms saved), or running with an open marker -> dead."""
    return [dict(r._mapping) for r in run(conn, _SUSPEND, {"instance_id": instance_id, "types": list(types)})]


_RESUME = query(
    "job_resume_instance",
    """
UPDATE workflow_jobs j
SET status = 'pending', run_at = now() + j.remaining_ms * interval '1 millisecond',
    remaining_ms = NULL, generation = j.generation + 1, updated_at = now()
WHERE j.instance_id = :instance_id AND j.status = 'paused'
RETURNING j.id, j.queue, j.run_at
""",
)


def resume_instance(conn: Connection, instance_id: str) -> list[dict[str, Any]]:
    """paused -> pending with exactly the saved remaining time."""
    return [dict(r._mapping) for r in run(conn, _RESUME, {"instance_id": instance_id})]


def _cancel_ctes(where: str, order: str = "") -> str:
    """The common table expressions of a cancel (``prior``: the jobs locked; ``moved``: their ``id`` and new
    ``generation``; ``closed``: the final attempt rows), for a statement that begins ``WITH`` them."""
    return f"""prior AS (
    SELECT {OPEN_ATTEMPT} FROM workflow_jobs j
    WHERE {where} AND j.status IN ('pending', 'running', 'paused', 'failed', 'dead') {order}
    FOR UPDATE
), moved AS (
    UPDATE workflow_jobs j
    SET status = 'canceled', generation = j.generation + 1, error_code = :code, last_error = :reason,
        lease_token = NULL, lease_until = NULL, execution_deadline = NULL, remaining_ms = NULL,
        {CLEAR_OPEN_ATTEMPT}, finished_at = now(), updated_at = now()
    FROM prior WHERE j.id = prior.id
    RETURNING j.id, j.generation
){_close_open_attempts("prior", "moved", "canceled", "'canceled'", "NULL")}"""


def _cancel_statement(ctes: str) -> str:
    """A cancel on its own (``ctes``: ``_cancel_ctes``'s), answering the jobs it moved."""
    return f"""
WITH {ctes}
SELECT id, generation FROM moved
"""


def _cancel_sql(where: str, order: str = "") -> str:
    return _cancel_statement(_cancel_ctes(where, order))


_CLEAR = query(
    "job_clear_instance",
    _cancel_sql(f"j.instance_id = :instance_id AND j.type = ANY(CAST(:types AS {JOB_TYPE_TYPE}[]))"),
)
# W-CTL-3: an unsafe call with an unknown outcome stays where it is (running with its marker, or the
# "needs confirmation" dead letter) for the operator; canceling cannot recall it (L-EFFECT-5).
_CLEAR_KEEP_UNKNOWN = query(
    "job_clear_instance_keep_unknown",
    _cancel_sql(
        f"j.instance_id = :instance_id AND j.type = ANY(CAST(:types AS {JOB_TYPE_TYPE}[])) "
        f"AND NOT (j.status = 'running' AND j.effect_marker IS NOT NULL) "
        f"AND NOT (j.status = 'dead' AND j.error_code = '{EXTERNAL_OUTCOME_UNKNOWN}')"
    ),
)
_CANCEL_ONE = query("job_cancel", _cancel_sql("j.id = :id"))
# the jobs of an instance that wait to run (pending or paused), not one that runs or has ended; locked in
# id order, like a loop over them would. ``CANCEL_WAITING_CTES``: the same for a statement of the engine
# that cancels them with another write (``app.engine.transitions.instance_moves``: an instance's end).
CANCEL_WAITING_CTES = _cancel_ctes(
    f"j.instance_id = :instance_id AND j.type = ANY(CAST(:types AS {JOB_TYPE_TYPE}[])) "
    "AND j.status IN ('pending', 'paused')",
    "ORDER BY j.id",
)
_CANCEL_WAITING = query("job_cancel_waiting", _cancel_statement(CANCEL_WAITING_CTES))


def instance_cancel_params(instance_id: str, types: Sequence[str], reason: str) -> dict[str, Any]:
    """The parameters of a cancel of an instance's jobs of ``types`` (``CANCEL_WAITING_CTES``,
    ``cancel_waiting``, ``clear_instance``)."""
    return {"instance_id": instance_id, "types": list(types), "code": CANCELED_BY_OPERATOR, "reason": reason}


def clear_instance(
    conn: Connection, instance_id: str, types: Sequence[str], reason: str, *, keep_unknown: bool = False
) -> list[dict[str, Any]]:
    """Cancel the instance's jobs of the clear scope; running executors lose ownership.
    ``keep_unknown``: leave jobs whose external outcome is (or may be) unknown untouched."""
    rows = run(
        conn,
        _CLEAR_KEEP_UNKNOWN if keep_unknown else _CLEAR,
        instance_cancel_params(instance_id, types, reason),
    )
    return [dict(r._mapping) for r in rows]


def cancel_waiting(
    conn: Connection, instance_id: str, types: Sequence[str], reason: str
) -> list[dict[str, Any]]:
    """An instance ends: its pending | paused jobs of ``types`` -> canceled (generation + 1), in one
    statement; running ones are left to finish (their engine step finds the instance ended)."""
    rows = run(conn, _CANCEL_WAITING, instance_cancel_params(instance_id, types, reason))
    return [dict(r._mapping) for r in rows]


def cancel_job(conn: Connection, job_id: int, reason: str) -> dict[str, Any] | None:
    """Operator skip: pending|running|paused|failed|dead -> canceled (generation + 1)."""
    row = run(conn, _CANCEL_ONE, {"id": job_id, "code": CANCELED_BY_OPERATOR, "reason": reason}).first()
    return dict(row._mapping) if row else None


_RETRY_ONE = query(
    "job_retry",
    """
UPDATE workflow_jobs j
SET status = 'pending', generation = j.generation + 1, attempts = 0,
    run_at = now() + CAST(:delay_ms AS double precision) * interval '1 millisecond',
    payload = COALESCE(CAST(:payload AS jsonb), j.payload),
    operation_key = COALESCE(:operation_key, j.operation_key),
    effect_marker = NULL, error_code = NULL, finished_at = NULL, result = NULL, updated_at = now()
WHERE j.id = :id AND j.status IN ('failed', 'dead', 'canceled')
RETURNING j.id, j.queue, j.generation, j.run_at
""",
)


def retry_job(
    conn: Connection,
    job_id: int,
    *,
    payload: Any = None,
    operation_key: str | None = None,
    delay_ms: float = 0,
) -> dict[str, Any] | None:
    """Manual retry: failed|dead|canceled -> pending, generation + 1, attempts reset (L-STATE-4)."""
    row = run(
        conn,
        _RETRY_ONE,
        {
            "id": job_id,
            "payload": None if payload is None else jsonx.dumps(payload),
            "operation_key": operation_key,
            "delay_ms": delay_ms,
        },
    ).first()
    return dict(row._mapping) if row else None
