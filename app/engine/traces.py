"""Failures that can be traced (issue 47): who ran a task attempt and how it failed. A claim that names its
worker ({host, pid, sdk}) writes it on the attempts it claimed, in the claim's own UPDATE
(``task_moves.claim``; ``workflow_tasks.worker``: the latest claim's that named one);
a failure that sends the exception's type and stack trace (the SDK bounds it: ``schemas.tasks.MAX_STACK``)
writes ``workflow_tasks.failure`` ({type, message, stack, worker}) on the attempt it failed, in the failure's
transaction. Neither is a state: the task's moves stay in ``transitions.task_moves``. The attempt views
(``history.rounds``) and the console show both."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app import jsonx
from app.engine.row_access import MISSING, jparse
from app.sql import query, run


def failure_of(error: dict[str, Any], worker: dict[str, Any] | None) -> dict[str, Any] | None:
    """The failure a worker reported (a loaded ``FailRequest``'s error and worker), or None when it sent
    neither a type, a stack trace nor its identity (a worker of an earlier SDK)."""
    if "type" not in error and "stack" not in error and worker is None:
        return None
    out: dict[str, Any] = {"message": error["message"]}
    for k in ("type", "stack"):
        if k in error:
            out[k] = error[k]
    if worker is not None:
        out["worker"] = worker
    return out


_TASK_FAILURE_RECORD = query(
    "task_failure_record",
    "UPDATE workflow_tasks SET failure = CAST(:f AS jsonb), worker = COALESCE(CAST(:w AS jsonb), worker) "
    "WHERE id = :id AND epoch = :epoch",
)


def record_failure(conn: Connection, task_id: str, epoch: int, failure: dict[str, Any] | None) -> None:
    """``failure`` on the attempt ``task_id`` failed at ``epoch`` (and its worker, when it names one)."""
    if failure is None:
        return
    run(
        conn,
        _TASK_FAILURE_RECORD,
        {
            "f": jsonx.dumps(failure),
            "w": jsonx.dumps(failure["worker"]) if "worker" in failure else None,
            "id": task_id,
            "epoch": epoch,
        },
    )


COLUMNS = "t.worker::text AS worker, t.failure::text AS failure"


def attempt_fields(row: dict[str, Any]) -> dict[str, Any]:
    """``worker`` and ``failure`` of an attempt read with ``COLUMNS`` (absent when not recorded)."""
    out: dict[str, Any] = {}
    for k in ("worker", "failure"):
        v = jparse(row.get(k))
        if v is not MISSING:
            out[k] = v
    return out


_TASK_FAILURE_READ = query(
    "task_failure_read",
    "SELECT failure::text FROM workflow_tasks WHERE id = :id",
)


def failure_of_task(conn: Connection, task_id: str | None) -> dict[str, Any] | None:
    """The failure recorded on attempt ``task_id`` (the task a step error names), or None."""
    if not task_id:
        return None
    raw = run(conn, _TASK_FAILURE_READ, {"id": task_id}).scalar()
    return None if raw is None else jsonx.loads_exact_db(raw)
