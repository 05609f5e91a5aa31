"""The task protocol (X-TASK): claim, heartbeat, complete, fail, read. Each claim increments the
attempt epoch; a result with another epoch is refused (STATE_CONFLICT) and changes nothing. A
completion advances the step (and its successors) in the same transaction. An expired lease returns
the task to its queue: the claim query takes CLAIMED tasks whose lease passed (by database time)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from app.engine import poll, steps
from app.engine.store import (
    MISSING,
    TERMINAL,
    jdump,
    jparse,
    lock_instance,
    read_step,
    step_specs,
    version_document,
)
from app.errors import NotFound, StateConflict

_TASK_COLS = """t.id, t.namespace_id, t.instance_id, t.step_id, t.step_key, t.activation_id, t.queue, t.state,
    t.input::text AS input, t.output::text AS output, t.error::text AS error, t.epoch, t.attempt,
    t.poll_round,
    t.lease_expires_at, t.deadline_at, t.created_at, t.updated_at, t.completed_at, t.purpose,
    (t.state = 'CLAIMED' AND t.lease_expires_at <= now()) AS lease_expired"""


def _task(row: Any) -> dict | None:
    if row is None:
        return None
    d = dict(row._mapping)
    for k in ("input", "output", "error"):
        d[k] = jparse(d[k])
    return d


def read_task(conn: Connection, task_id: str, namespace_id: str, *, lock: bool = False) -> dict:
    from app.ids import is_hex32

    if not is_hex32(task_id):
        raise NotFound("task not found")
    sql = f"SELECT {_TASK_COLS} FROM workflow_tasks t WHERE t.id = :id" + (" FOR UPDATE" if lock else "")
    task = _task(conn.execute(text(sql), {"id": task_id}).first())
    if task is None or task["namespace_id"] != namespace_id:
        raise NotFound("task not found")
    return task


_CLAIM = text(
    f"""
WITH picked AS (
    SELECT t.id FROM workflow_tasks t
    WHERE t.namespace_id = :ns AND t.queue = ANY(CAST(:queues AS text[]))
      AND (t.state = 'PENDING' OR (t.state = 'CLAIMED' AND t.lease_expires_at <= now()))
      AND t.deadline_at > now()
      -- W-CTL: a paused, cancelling or stopping instance grants no new execution, not even a task
      -- whose lease expired (the cancel's settlement decides it); L-PAUSE-3: compensation is not held
      AND (t.purpose = 'COMPENSATION'
           OR NOT EXISTS (SELECT 1 FROM workflow_instances i WHERE i.id = t.instance_id
                          AND (i.paused OR i.cancel_requested_at IS NOT NULL OR i.state = 'CANCELLING')))
    ORDER BY t.created_at, t.id
    LIMIT :n
    FOR UPDATE SKIP LOCKED
)
UPDATE workflow_tasks t SET state = 'CLAIMED', epoch = t.epoch + 1, updated_at = now(),
    lease_expires_at = LEAST(now() + make_interval(secs => :lease), t.deadline_at)
FROM picked WHERE t.id = picked.id
RETURNING {_TASK_COLS}
"""
)


def claim(
    conn: Connection, namespace_id: str, queues: list[str], max_tasks: int, lease_seconds: float
) -> list[dict]:
    rows = conn.execute(
        _CLAIM, {"ns": namespace_id, "queues": queues, "n": max_tasks, "lease": lease_seconds}
    )
    return sorted((_task(r) for r in rows), key=lambda t: (t["created_at"], t["id"]))


def heartbeat(conn: Connection, namespace_id: str, task_id: str, epoch: int, lease_seconds: float) -> dict:
    read_task(conn, task_id, namespace_id)
    row = conn.execute(
        text(
            f"""
UPDATE workflow_tasks t SET lease_expires_at = LEAST(now() + make_interval(secs => :lease), t.deadline_at),
    updated_at = now()
WHERE t.id = :id AND t.epoch = :epoch AND t.state = 'CLAIMED' AND t.deadline_at > now()
  AND t.lease_expires_at > now()
RETURNING {_TASK_COLS}
"""
        ),
        {"id": task_id, "epoch": epoch, "lease": lease_seconds},
    ).first()
    if row is None:
        raise StateConflict(
            "the task is not claimed with this epoch (its lease expired, or it was re-claimed, settled or "
            "timed out)"
        )
    return _task(row)


def _locked_for_result(conn: Connection, namespace_id: str, task_id: str, epoch: int) -> tuple[dict, dict]:
    """Lock instance, then task; refuse an old epoch or a settled task without changing anything."""
    task = read_task(conn, task_id, namespace_id)
    inst = lock_instance(conn, task["instance_id"])
    task = read_task(conn, task_id, namespace_id, lock=True)
    if task["epoch"] != epoch or task["state"] != "CLAIMED":
        raise StateConflict(
            f"task attempt epoch {epoch} is not the current claim (epoch {task['epoch']}, state "
            f"{task['state']})"
        )
    if task["lease_expired"]:  # the task is back in its queue (X-TASK), whether or not swept yet
        raise StateConflict(
            f"the lease of task attempt epoch {epoch} expired; the task was returned to its queue"
        )
    return inst, task


def return_expired_leases(conn: Connection, limit: int = 1000) -> int:
    """The periodic sweep (run by the drain): CLAIMED tasks whose lease passed (database time) go back
    to PENDING, so reads and queue counts are truthful without waiting for the next claim. The epoch
    is kept (the next claim increments it); a result for the expired claim is already refused.
    SKIP LOCKED: a task being settled right now is left for the next pass. Tasks of an instance with a
    cancel requested are left to the cancel's settlement (W-CTL-3: they must not be claimed again)."""
    rows = conn.execute(
        text(
            """
UPDATE workflow_tasks t SET state = 'PENDING', lease_expires_at = NULL, updated_at = now()
FROM (SELECT id FROM workflow_tasks w WHERE w.state = 'CLAIMED' AND w.lease_expires_at <= now()
        AND NOT EXISTS (SELECT 1 FROM workflow_instances i
                        WHERE i.id = w.instance_id AND i.cancel_requested_at IS NOT NULL)
      ORDER BY w.lease_expires_at, w.id LIMIT :n FOR UPDATE OF w SKIP LOCKED) picked
WHERE t.id = picked.id
RETURNING t.id
"""
        ),
        {"n": limit},
    ).all()
    return len(rows)


def complete(conn: Connection, namespace_id: str, task_id: str, epoch: int, output: Any) -> dict:
    inst, task = _locked_for_result(conn, namespace_id, task_id, epoch)
    conn.execute(
        text(
            "UPDATE workflow_tasks SET state = 'COMPLETED', output = CAST(:o AS jsonb), completed_at = "
            "now(), "
            "updated_at = now(), lease_expires_at = NULL WHERE id = :id"
        ),
        {"id": task_id, "o": jdump(output)},
    )
    settle_result(conn, inst, task, "completed", output)
    return read_task(conn, task_id, namespace_id)


def fail(conn: Connection, namespace_id: str, task_id: str, epoch: int, error: dict) -> dict:
    inst, task = _locked_for_result(conn, namespace_id, task_id, epoch)
    conn.execute(
        text(
            "UPDATE workflow_tasks SET state = 'FAILED', error = CAST(:e AS jsonb), completed_at = now(), "
            "updated_at = now(), lease_expires_at = NULL WHERE id = :id"
        ),
        {"id": task_id, "e": jdump(error)},
    )
    settle_result(conn, inst, task, "failed", error)
    return read_task(conn, task_id, namespace_id)


def time_out(conn: Connection, inst: dict, task_id: str) -> bool:
    """The ``task_timeout`` job: an open task past its deadline times out (then the retry policy)."""
    row = conn.execute(
        text(
            "UPDATE workflow_tasks SET state = 'TIMED_OUT', completed_at = now(), updated_at = now(), "
            "lease_expires_at = NULL, error = CAST(:e AS jsonb) "
            "WHERE id = :id AND state IN ('PENDING', 'CLAIMED') AND deadline_at <= now() RETURNING id"
        ),
        {
            "id": task_id,
            "e": jdump({"message": "task deadline passed", "retryable": True, "code": "TASK_TIMEOUT"}),
        },
    ).first()
    if row is None:
        return False
    task = read_task(conn, task_id, inst["namespace_id"])
    settle_result(conn, inst, task, "failed", task["error"])
    return True


def settle_result(conn: Connection, inst: dict, task: dict, kind: str, value: Any) -> None:
    """Apply a task outcome to its step when the task belongs to the step's current activation (a
    compensation task's outcome moves its instance's compensation chain instead)."""
    if task.get("purpose") == "COMPENSATION":
        from app.engine import saga

        saga.on_task_result(conn, inst, task, kind, value)
        return
    if inst["state"] in TERMINAL:
        return
    if inst["cancel_requested_at"] is not None:  # W-CTL-3: collected, but nothing new starts
        from app.engine import control

        control.collect_during_cancel(conn, inst, task, kind, value)
        return
    step = read_step(conn, inst["id"], task["step_key"])
    if (
        step is None
        or step["activation_id"] != task["activation_id"]
        or step["state"] not in ("ACTIVE", "WAITING")
    ):
        return
    spec = step_specs(version_document(conn, inst["definition_version_id"]))[step["key"]]
    if step["kind"] == "POLL":
        poll.on_result(conn, inst, step, spec, task, kind, value)
        return
    if kind == "completed":
        steps.complete_step(conn, inst["id"], step, value if value is not MISSING else None)
        return
    policy = spec.get("retry", {})
    if value.get("retryable", True) and step["task_attempts"] < policy.get("max_attempts", 1):
        delay = retry_delay_seconds(policy, step["task_attempts"])
        if delay <= 0:
            start_next_attempt(conn, inst, step, spec)
        else:  # the step WAITS for its next attempt; a delay_wake job starts it (handlers/timers.py)
            nxt = step["task_attempts"] + 1
            steps._job(  # noqa: SLF001 - the engine's own job helper
                conn,
                inst,
                "delay_wake",
                {"wake": "task_retry", "activation_id": step["activation_id"], "attempt": nxt},
                step_key=step["key"],
                key=f"task_retry:{step['activation_id']}:{nxt}",
                run_at=conn.execute(
                    text("SELECT now() + make_interval(secs => :d)"), {"d": delay}
                ).scalar_one(),
            )
            conn.execute(
                text(
                    "UPDATE workflow_steps SET state = 'WAITING', revision = revision + 1, updated_at = now() "
                    "WHERE id = :id"
                ),
                {"id": step["id"]},
            )
        steps.after_change(conn, inst["id"])
        return
    code = "TASK_TIMEOUT" if value.get("code") == "TASK_TIMEOUT" else "TASK_FAILED"
    steps.fail_step(
        conn, inst["id"], step, {"code": code, "message": value.get("message", ""), "task_id": task["id"]}
    )


DEFAULT_BACKOFF_SECONDS = 30
DEFAULT_MAX_BACKOFF_SECONDS = 900


def retry_delay_seconds(policy: dict, failed_attempt: int) -> int:
    """A TASK step's retry backoff (like the ledger's L-STATE-3 curve): attempt n+1 starts
    ``backoff_seconds * 2^(n-1)`` after attempt n failed or timed out, one delay capped at
    ``max_backoff_seconds``; ``backoff_seconds: 0`` retries at once."""
    base = policy.get("backoff_seconds", DEFAULT_BACKOFF_SECONDS)
    cap = policy.get("max_backoff_seconds", DEFAULT_MAX_BACKOFF_SECONDS)
    if base <= 0:
        return 0
    return min(base * 2 ** max(failed_attempt - 1, 0), max(cap, 0))


def start_next_attempt(conn: Connection, inst: dict, step: dict, spec: dict) -> str:
    """A new task for the next attempt of the step's current activation (own deadline and
    ``task_timeout`` job); the step is ACTIVE again and points at it. The caller runs after_change."""
    new_task = steps.create_task(
        conn,
        inst,
        step,
        step["activation_id"],
        spec["queue"],
        step["act_input"] if step["act_input"] is not MISSING else {},
        attempt=step["task_attempts"] + 1,
        timeout_seconds=spec.get("timeout_seconds", steps.DEFAULT_TASK_TIMEOUT_SECONDS),
    )
    conn.execute(
        text("UPDATE workflow_activations SET task_attempts = task_attempts + 1 WHERE id = :id"),
        {"id": step["activation_id"]},
    )
    conn.execute(
        text(
            "UPDATE workflow_steps SET state = 'ACTIVE', task_id = :t, revision = revision + 1, "
            "updated_at = now() WHERE id = :id"
        ),
        {"id": step["id"], "t": new_task},
    )
    return new_task


def task_view(task: dict) -> dict:
    from app.jsonx import rfc3339

    state = "PENDING" if task.get("lease_expired") else task["state"]
    out: dict[str, Any] = {
        "id": task["id"],
        "queue": task["queue"],
        "state": state,
        "workflow_id": task["instance_id"],
        "step_key": task["step_key"],
        "epoch": task["epoch"],
        "attempt": task["attempt"],
        "deadline_at": rfc3339(task["deadline_at"]),
        "created_at": rfc3339(task["created_at"]),
        "updated_at": rfc3339(task["updated_at"]),
    }
    if task["input"] is not MISSING:
        out["input"] = task["input"]
    if task["poll_round"] is not None:
        out["poll_round"] = task["poll_round"]
    if task["lease_expires_at"] is not None and state == "CLAIMED":
        out["lease_expires_at"] = rfc3339(task["lease_expires_at"])
    if task["output"] is not MISSING:
        out["output"] = task["output"]
    if task["error"] is not MISSING:
        out["error"] = task["error"]
    if task["completed_at"] is not None:
        out["completed_at"] = rfc3339(task["completed_at"])
    return out
