"""The task protocol (X-TASK): claim, heartbeat, complete, fail, read. Each claim increments the
attempt epoch; a result with another epoch is refused (STATE_CONFLICT) and changes nothing. A
completion advances the step (and its successors) in the same transaction. An expired lease returns
the task to its queue: the claim query takes CLAIMED tasks whose lease passed (by database time)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

from sqlalchemy import Connection, Row

from app import jsonx
from app.engine import driver, jobs_and_tasks
from app.engine.decide.tasks import retry_delay_seconds
from app.engine.row_access import MISSING, jparse, lock_instance_and_task, lock_with_task
from app.engine.states import task_open_sql
from app.engine.transitions import task_moves
from app.engine.transitions.task_moves import TASK_COLS as _TASK_COLS
from app.errors import IdempotencyConflict, NotFound, StateConflict
from app.ids import is_hex32
from app.jsonx import rfc3339
from app.sql import query, run

__all__ = ["retry_delay_seconds"]

# A result's task columns, and its deadline in seconds from the transaction's now() (``jobs_and_tasks.watch_covers``).
_RESULT_COLS = _TASK_COLS + ", EXTRACT(EPOCH FROM t.deadline_at - now())::float8 AS deadline_in"
_LOCK_WITH_TASK = lock_with_task(_RESULT_COLS)  # the instance and the task, locked in one statement


@overload
def _task(row: Row[Any]) -> dict[str, Any]: ...
@overload
def _task(row: Row[Any] | None) -> dict[str, Any] | None: ...
def _task(row: Row[Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return _task_of(dict(row._mapping))


def _task_of(d: dict[str, Any]) -> dict[str, Any]:
    """A task as the engine reads it from its ``TASK_COLS`` (JSON as text): the JSON parsed, in place."""
    for k in ("input", "output", "error"):
        d[k] = jparse(d[k])
    return d


_READ_TASK = query("task_read", f"SELECT {_TASK_COLS} FROM workflow_tasks t WHERE t.id = :id")


def read_task(conn: Connection, task_id: str, namespace_id: str) -> dict:
    if not is_hex32(task_id):
        raise NotFound("task not found")
    task = _task(run(conn, _READ_TASK, {"id": task_id}).first())
    if task is None or task["namespace_id"] != namespace_id:
        raise NotFound("task not found")
    return task


_OPEN_TASKS_SQL = f"""
SELECT {_TASK_COLS} FROM workflow_tasks t
WHERE t.namespace_id = :ns AND t.state IN ('PENDING', 'CLAIMED'){{queues}}
ORDER BY t.created_at, t.id LIMIT :limit
"""
_OPEN_TASKS = query("tasks_open", _OPEN_TASKS_SQL.format(queues=""))
_OPEN_TASKS_ON_QUEUES = query(
    "tasks_open_on_queues", _OPEN_TASKS_SQL.format(queues=" AND t.queue = ANY(CAST(:queues AS text[]))")
)


def open_tasks(conn: Connection, namespace_id: str, queues: tuple[str, ...] | None, limit: int) -> list[dict]:
    """Open (PENDING or CLAIMED) tasks of a namespace, oldest first, on ``queues`` (None = every queue);
    at most ``limit`` rows (the claim index serves it)."""
    params: dict[str, Any] = {
        "ns": namespace_id,
        "limit": limit,
        "queues": None if queues is None else list(queues),
    }
    sql = _OPEN_TASKS if queues is None else _OPEN_TASKS_ON_QUEUES
    return [t for t in (_task(r) for r in run(conn, sql, params)) if t is not None]


def claim(
    conn: Connection, namespace_id: str, queues: list[str], max_tasks: int, lease_seconds: float
) -> list[dict]:
    """A claim without an Idempotency-Key (the console's): up to ``max_tasks`` tasks, oldest first."""
    return claim_keyed(conn, namespace_id, queues, max_tasks, lease_seconds, None, None)[0]


def claim_keyed(
    conn: Connection,
    namespace_id: str,
    queues: list[str],
    max_tasks: int,
    lease_seconds: float,
    key: str | None,
    fingerprint: str | None,
    worker: dict | None = None,
) -> tuple[list[dict], bool]:
    """A claim whose receipt is kept on the tasks it claims (``workflow_tasks.claim_key``): ``(tasks,
    replayed)``. The first claim with ``key`` claims up to ``max_tasks`` tasks, oldest first, and marks
    them with ``key`` and ``fingerprint``; a claim with a ``key`` that marks tasks already claims nothing
    and answers those tasks again, as they now are at the epoch that claim gave them (``replayed``), or
    raises IdempotencyConflict when the first claim's request had another ``fingerprint``. A claim that
    found nothing marks nothing: the key can still claim. ``worker``: the claiming worker's identity, kept
    on the attempts it claims by the claim's own UPDATE (``traces``). Run it after the key's lock
    (``app.idempotency.execute_on_rows``), so that a duplicate in flight is seen."""
    rows = task_moves.claim(
        conn,
        namespace_id,
        queues,
        max_tasks,
        lease_seconds,
        key=key,
        fingerprint=fingerprint,
        worker=None if worker is None else jsonx.dumps(worker),
    )
    replayed = bool(rows) and rows[0].replayed
    if replayed and any(r.claim_fingerprint != fingerprint for r in rows):
        raise IdempotencyConflict("this Idempotency-Key was already used with a different request")
    tasks = sorted((_task(r) for r in rows), key=lambda t: (t["created_at"], t["id"]))
    for t in tasks:
        del t["claim_fingerprint"], t["replayed"]
    return tasks, replayed


def heartbeat(conn: Connection, namespace_id: str, task_id: str, epoch: int, lease_seconds: float) -> dict:
    read_task(conn, task_id, namespace_id)
    row = task_moves.heartbeat(conn, task_id, epoch, lease_seconds)
    if row is None:
        raise StateConflict(
            "the task is not claimed with this epoch (its lease expired, or it was re-claimed, settled or "
            "timed out)"
        )
    return _task(row)


def _locked_for_result(
    conn: Connection, namespace_id: str, task_id: str, epoch: int, queue_ok: Callable[[str], bool] | None
) -> tuple[dict, dict]:
    """Lock instance (found through the task), then task, in one statement; refuse a task outside the
    caller's queues, an old epoch or a settled task without changing anything."""
    if not is_hex32(task_id):
        raise NotFound("task not found")
    inst, row = lock_instance_and_task(conn, task_id, namespace_id, _LOCK_WITH_TASK)
    task = _task_of(row)
    if queue_ok is not None and not queue_ok(task["queue"]):
        raise NotFound("not found")
    if task["epoch"] != epoch or task["state"] != "CLAIMED":
        raise StateConflict(
            f"task attempt epoch {epoch} is not the current claim (epoch {task['epoch']}, state "
            f"{task['state']})"
        )
    if task["lease_expired"]:  # the task is back in its queue (X-TASK), whether or not swept yet
        raise StateConflict(
            f"the lease of task attempt epoch {epoch} expired; the task was returned to its queue"
        )
    # a live claim ends before the task's deadline (its lease never passes it): the instance's watch is due
    # no later than that deadline, so the next step's task, due no earlier, arms nothing (jobs_and_tasks.watch_covers)
    jobs_and_tasks.watch_covers(conn, inst["id"], task.pop("deadline_in"))
    return inst, task


def return_expired_leases(conn: Connection, limit: int = 1000) -> int:
    """The periodic sweep (run by the drain): CLAIMED tasks whose lease passed (database time) go back
    to PENDING, so reads and queue counts are truthful without waiting for the next claim. The epoch
    is kept (the next claim increments it); a result for the expired claim is already refused.
    SKIP LOCKED: a task being settled right now is left for the next pass. Tasks of an instance with a
    cancel requested are left to the cancel's settlement (W-CTL-3: they must not be claimed again)."""
    return task_moves.return_expired(conn, limit)


def complete(
    conn: Connection,
    namespace_id: str,
    task_id: str,
    epoch: int,
    output: Any,
    queue_ok: Callable[[str], bool] | None = None,
    key: str | None = None,
) -> dict:
    """The claim of epoch ``epoch`` ends with ``output``; the step (and its successors) advance in the
    same transaction. ``queue_ok``: the caller's queue scope (a task on another queue is not found).
    ``key``: the request's Idempotency-Key, kept with the result (``ended_with_key``). Returns the task as
    it now is."""
    inst, task = _locked_for_result(conn, namespace_id, task_id, epoch, queue_ok)
    spec = driver.task_step_spec(conn, inst, task)
    if driver.completes_with_its_step(inst, task, spec):  # the step closes in the completion's statement
        row, steps, stored = task_moves.complete_closing_step(
            conn, task_id, epoch, output, inst["id"], task["activation_id"], key
        )
        driver.task_ended(
            conn, inst, task, "completed", output, steps, spec=spec, closing=True, stored=stored
        )
    else:
        row, steps = task_moves.complete(conn, task_id, epoch, output, inst["id"], key)
        driver.task_ended(conn, inst, task, "completed", output, steps, spec=spec)
    done = _task(row)
    return done


def fail(
    conn: Connection,
    namespace_id: str,
    task_id: str,
    epoch: int,
    error: dict,
    queue_ok: Callable[[str], bool] | None = None,
    key: str | None = None,
) -> dict:
    """Like ``complete``, the claim failing with ``error`` (then the step's retry policy)."""
    inst, task = _locked_for_result(conn, namespace_id, task_id, epoch, queue_ok)
    row, steps = task_moves.fail(conn, task_id, epoch, error, inst["id"], key)
    driver.task_ended(conn, inst, task, "failed", error, steps)
    done = _task(row)
    return done


_TASK_ENDED_WITH_KEY = query(
    "task_ended_with_key",
    "SELECT EXISTS (SELECT 1 FROM workflow_tasks WHERE id = :id AND namespace_id = :ns "
    "AND state = :s AND result_key = CAST(:key AS text))",
)


def ended_with_key(conn: Connection, namespace_id: str, task_id: str, state: str, key: str) -> bool:
    """True when the claim of ``task_id`` ended in ``state`` (COMPLETED or FAILED) by a result sent with the
    Idempotency-Key ``key``: a result refused with that key is that key used again for another request."""
    return bool(
        run(
            conn,
            _TASK_ENDED_WITH_KEY,
            {"id": task_id, "ns": namespace_id, "s": state, "key": key},
        ).scalar()
    )


TIMEOUT_ERROR = {"message": "task deadline passed", "retryable": True, "code": "TASK_TIMEOUT"}


_TASK_OVERDUE_IDS = query(
    "task_overdue_ids",
    # open tasks, by the instance's index (row_access._OPEN_WORK)
    "SELECT id FROM workflow_tasks WHERE instance_id = :i "
    f"AND {task_open_sql()} "
    "AND deadline_at <= now() AND (CAST(:before AS timestamptz) IS NULL OR deadline_at < :before) "
    "ORDER BY deadline_at, id",
)


def time_out_overdue(conn: Connection, inst: dict, before: Any = None) -> list[str]:
    """Every open task of ``inst`` past its deadline (and, with ``before``, due before it) times out
    (then the retry policy), earliest first; the ids of those timed out. The instance's watch calls it
    (``handlers.task_timeouts``)."""
    due = run(
        conn,
        _TASK_OVERDUE_IDS,
        {"i": inst["id"], "before": before},
    ).scalars()
    return [task_id for task_id in due if time_out(conn, inst, task_id)]


def time_out(conn: Connection, inst: dict, task_id: str) -> bool:
    """An open task of ``inst`` past its deadline times out (then the retry policy). False when it was
    settled first or is not due."""
    if not task_moves.try_time_out(conn, task_id, inst["id"], TIMEOUT_ERROR):
        return False
    task = read_task(conn, task_id, inst["namespace_id"])
    driver.task_ended(conn, inst, task, "failed", task["error"])
    return True


def task_view(task: dict) -> dict:
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
