"""Operator mutations of the job ledger (SPEC L-OPS, L-OPS-2, L-OPS-3): retry one, skip one, batch
retry / skip, conditional replay. Every status change goes through the guarded statements of
``app.ledger.transitions`` (``retry_job``, ``cancel_job``); every change writes an audit row in the caller's
transaction; retried jobs wake their pools after commit."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection

from app import audit, jsonx
from app.auth import Principal
from app.errors import InvalidArgument, NotFound, StateConflict
from app.ids import new_id
from app.ledger.enqueue import operation_key_for
from app.ledger.hints import publish_after_commit
from app.ledger.replay import ReplayFilter, select_for_replay
from app.ledger.states import JobType
from app.ledger.transitions import cancel_job, retry_job
from app.sql import query, run

RETRYABLE = ("failed", "dead", "canceled")
SKIPPABLE = ("pending", "running", "paused", "failed", "dead")
DEFAULT_RATE = 20
MAX_REPLAY = 500
DEFAULT_SKIP_REASON = "skipped by operator"

_LOCK = query(
    "job_lock_for_action",
    """
SELECT id, type, queue, status, attempts, max_attempts, generation, operation_key, instance_id,
       task_id, step_key, payload::text AS payload, last_error, error_code, run_at,
       (SELECT wi.namespace_id FROM workflow_instances wi WHERE wi.id = workflow_jobs.instance_id)
           AS namespace_id
FROM workflow_jobs WHERE id = :id FOR UPDATE
""",
)

# Retrying with a replaced payload (L-OPS). The engine's own job types carry ids the engine wrote
# (instance, activation, task, step): a replacement could point them at another instance, so it is
# refused. Integration types may get a new payload, but the fields that name what the job belongs
# to (every ``*_id`` key and ``step_key``) must stay as they are.
ENGINE_OWNED_PAYLOAD = frozenset(
    {
        JobType.DELAY_WAKE,
        JobType.TASK_TIMEOUT,
        JobType.SUBPROCESS_SPAWN,
        JobType.SUBPROCESS_JOIN,
        JobType.COMPENSATION_ACTION,
        JobType.SCHEDULE_LAUNCH,
    }
)


def payload_refusal(job_type: str, current: Any, replacement: Any) -> str | None:
    """Why ``replacement`` may not replace the payload of a job of ``job_type`` (None = allowed)."""
    if job_type in ENGINE_OWNED_PAYLOAD:
        return f"the payload of a {job_type} job is the engine's own; retry it without a payload"
    if not isinstance(replacement, dict):
        return "a replacement payload must be a JSON object"
    current = current if isinstance(current, dict) else {}
    for key in sorted(set(current) | set(replacement)):
        if (key.endswith("_id") or key == "step_key") and current.get(key) != replacement.get(key):
            return f"payload field {key!r} names what the job belongs to and cannot be changed"
    return None


def visible(row: Any, principal: Principal) -> bool:
    """A namespace-scoped operator reaches only its namespace's instances' jobs."""
    return principal.job_namespace is None or row.namespace_id == principal.job_namespace


def _audit_job(conn: Connection, row: Any, actor: Actor, action: str, after: dict[str, Any]) -> None:
    """The audit row in the operator's namespace and, when the job belongs to another namespace's
    instance, the same row in that namespace's audit too (its owners see who touched their work)."""
    spaces = [None]
    if row.namespace_id is not None and row.namespace_id != actor.principal.namespace_id:
        spaces.append(row.namespace_id)
    for ns in spaces:
        audit.record(
            conn,
            principal=actor.principal,
            request_id=actor.request_id,
            action=action,
            target_type="job",
            target_id=str(row.id),
            workflow_id=row.instance_id,
            operation_id=actor.operation_id,
            reason=actor.reason,
            before=_summary(row),
            after=after,
            namespace_id=ns,
        )


@dataclass(frozen=True)
class Actor:
    principal: Principal
    request_id: str | None
    reason: str | None = None
    operation_id: str | None = None


def _summary(row: Any) -> dict[str, Any]:
    return {
        "status": row.status,
        "generation": row.generation,
        "attempts": row.attempts,
        "error_code": row.error_code,
    }


def retry_refusal(status: str, attempts: int) -> str | None:
    """Why a job may not be retried manually now (None = eligible)."""
    if status in RETRYABLE:
        return None
    if status == "pending" and attempts > 0:
        return "the job is pending under automatic retry; a competing manual retry is refused"
    if status == "paused":
        return "the job is paused with its instance; it continues only when the instance is resumed"
    return f"only failed, dead or canceled jobs can be retried (status is {status})"


def skip_refusal(status: str) -> str | None:
    if status in SKIPPABLE:
        return None
    return f"only pending, running, paused, failed or dead jobs can be skipped (status is {status})"


def _retry_locked(
    conn: Connection,
    row: Any,
    actor: Actor,
    *,
    action: str,
    delay_ms: float = 0,
    payload: Any = None,
    has_payload: bool = False,
) -> dict[str, Any] | None:
    """Retry a locked row if eligible; returns the new state or None (ineligible)."""
    if retry_refusal(row.status, row.attempts) is not None:
        return None
    op_key = None
    if has_payload:
        current = jsonx.dumps(_sorted(jsonx.loads_exact_db(row.payload)))
        if jsonx.dumps(_sorted(payload)) != current:  # a changed input is a new operation (L-CLAIM table)
            refusal = payload_refusal(row.type, jsonx.loads_exact_db(row.payload), payload)
            if refusal is not None:
                raise InvalidArgument(refusal, field="payload")
            op_key = operation_key_for(
                row.type, payload, (row.instance_id, row.task_id, row.step_key, new_id())
            )
    moved = retry_job(
        conn, row.id, payload=payload if has_payload else None, operation_key=op_key, delay_ms=delay_ms
    )
    if moved is None:  # the guarded statement refused (raced)
        return None
    publish_after_commit(conn, [moved["queue"]])
    after = {"status": "pending", "generation": moved["generation"], "attempts": 0, "run_at": moved["run_at"]}
    if op_key:
        after["operation_key"] = op_key
    _audit_job(conn, row, actor, action, after)
    return {"id": str(row.id), **after, "operation_key": op_key or row.operation_key}


def _sorted(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _sorted(o[k]) for k in sorted(o)}
    if isinstance(o, list):
        return [_sorted(v) for v in o]
    return o


def _skip_locked(conn: Connection, row: Any, actor: Actor, *, action: str) -> dict[str, Any] | None:
    if skip_refusal(row.status) is not None:
        return None
    moved = cancel_job(conn, row.id, actor.reason or DEFAULT_SKIP_REASON)
    if moved is None:
        return None
    after = {"status": "canceled", "generation": moved["generation"]}
    _audit_job(conn, row, actor, action, after)
    return {"id": str(row.id), **after}


def _lock(conn: Connection, job_id: int, principal: Principal) -> Any:
    row = run(conn, _LOCK, {"id": job_id}).first()
    if row is None or not visible(row, principal):
        raise NotFound(f"job {job_id} not found")
    return row


def retry_one(
    conn: Connection, job_id: int, actor: Actor, *, payload: Any = None, has_payload: bool = False
) -> dict:
    row = _lock(conn, job_id, actor.principal)
    refusal = retry_refusal(row.status, row.attempts)
    if refusal:
        raise StateConflict(refusal)
    done = _retry_locked(conn, row, actor, action="job.retry", payload=payload, has_payload=has_payload)
    if done is None:
        raise StateConflict("the job changed state; reload and try again")
    return {"job": done}


def skip_one(conn: Connection, job_id: int, actor: Actor) -> dict:
    row = _lock(conn, job_id, actor.principal)
    refusal = skip_refusal(row.status)
    if refusal:
        raise StateConflict(refusal)
    done = _skip_locked(conn, row, actor, action="job.skip")
    if done is None:
        raise StateConflict("the job changed state; reload and try again")
    return {"job": done}


def stagger_ms(index: int, rate: int) -> float:
    """Item ``index`` (0-based among submitted items) runs at now + index / rate seconds (L-OPS-3)."""
    return index * 1000.0 / rate


def _batch(
    conn: Connection, ids: list[int], actor: Actor, *, retry: bool, rate: int, start_index: int = 0
) -> dict[str, Any]:
    submitted: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    state_skips = 0
    for job_id in dict.fromkeys(ids):
        row = run(conn, _LOCK, {"id": job_id}).first()
        if row is None or not visible(row, actor.principal):
            skipped.append({"id": str(job_id), "status": None, "reason": "not found"})
            continue
        if retry:
            refusal = retry_refusal(row.status, row.attempts)
            done = (
                None
                if refusal
                else _retry_locked(
                    conn,
                    row,
                    actor,
                    action="job.batch_retry",
                    delay_ms=stagger_ms(start_index + len(submitted), rate),
                )
            )
        else:
            refusal = skip_refusal(row.status)
            done = None if refusal else _skip_locked(conn, row, actor, action="job.batch_skip")
        if done is None:
            skipped.append({"id": str(job_id), "status": row.status, "reason": refusal or "state changed"})
            state_skips += 1
        else:
            submitted.append(done)
    audit.record(
        conn,
        principal=actor.principal,
        request_id=actor.request_id,
        action="jobs.batch_retry" if retry else "jobs.batch_skip",
        target_type="job_batch",
        target_id=actor.operation_id or new_id(),
        operation_id=actor.operation_id,
        reason=actor.reason,
        before={"requested": [str(i) for i in dict.fromkeys(ids)]},
        after={"submitted": [s["id"] for s in submitted], "skipped": [s["id"] for s in skipped]},
    )
    return {
        "operation_id": actor.operation_id,
        "submitted": len(submitted),
        "skipped_for_state": state_skips,
        "not_found": len(skipped) - state_skips,
        "submitted_ids": [s["id"] for s in submitted],
        "skipped": skipped,
        "items": submitted,
        **({"rate": rate} if retry else {}),
    }


def batch_retry(
    conn: Connection, ids: list[int], actor: Actor, *, rate: int = DEFAULT_RATE, start_index: int = 0
) -> dict[str, Any]:
    """``start_index``: items already submitted by earlier calls of the same operation (the CLI sends
    a large batch in chunks), so the stagger continues where the previous chunk ended."""
    return _batch(conn, ids, actor, retry=True, rate=rate, start_index=start_index)


def batch_skip(conn: Connection, ids: list[int], actor: Actor) -> dict[str, Any]:
    return _batch(conn, ids, actor, retry=False, rate=DEFAULT_RATE)


def replay(
    conn: Connection,
    f: ReplayFilter,
    actor: Actor,
    *,
    limit: int = MAX_REPLAY,
    rate: int = DEFAULT_RATE,
    start_index: int = 0,
) -> dict[str, Any]:
    """Retry up to ``limit`` (≤ 500) matching dead/failed jobs, oldest first, staggered by ``rate``.
    ``success`` counts submitted operations; business outcomes are read from the ledger later."""
    limit = max(1, min(limit, MAX_REPLAY))
    f = replace(f, namespace_id=actor.principal.job_namespace)
    ids, matched = select_for_replay(conn, f, limit=limit)
    submitted: list[str] = []
    for job_id in ids:
        row = run(conn, _LOCK, {"id": job_id}).first()
        done = row and _retry_locked(
            conn, row, actor, action="job.replay", delay_ms=stagger_ms(start_index + len(submitted), rate)
        )
        if done:
            submitted.append(done["id"])
    audit.record(
        conn,
        principal=actor.principal,
        request_id=actor.request_id,
        action="jobs.replay",
        target_type="job_selection",
        target_id=actor.operation_id or new_id(),
        operation_id=actor.operation_id,
        reason=actor.reason,
        before={"matched": matched, "conditions": f.as_dict()},
        after={"submitted": len(submitted), "limit": limit, "rate": rate},
    )
    return {
        "operation_id": actor.operation_id,
        "success": len(submitted),
        "matched": matched,
        "remaining": max(0, matched - len(submitted)),
        "limit": limit,
        "rate": rate,
        "submitted_ids": submitted,
        "conditions": f.as_dict(),
    }
