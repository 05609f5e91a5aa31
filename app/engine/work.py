"""The units of work the engine issues, inside the caller's transaction (instance row locked first):
ledger jobs (one idempotency key per engine event, so a replayed decision enqueues nothing twice)
and tasks (a task always comes with the ``task_timeout`` job that enforces its deadline)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine.store import jdump
from app.engine.transitions import tasks as task_moves
from app.ids import new_id
from app.ledger import transitions as ledger_moves
from app.ledger.enqueue import enqueue
from app.ledger.states import JobType
from app.sql import run

DEFAULT_TASK_TIMEOUT_SECONDS = 300
COMPENSATION_TASK_SECONDS = 7 * 24 * 3600


def job(
    conn: Connection,
    inst: dict,
    job_type: str,
    payload: dict,
    *,
    key: str,
    step_key: str | None = None,
    task_id: str | None = None,
    run_at: Any = None,
    delay_ms: float = 0,
) -> None:
    """An engine job of ``inst`` with idempotency key ``{job_type}:{key}`` and the instance's trace, due
    at ``run_at`` or ``delay_ms`` from now (database time); its insert joins the transaction's next write."""
    enqueue(
        conn,
        job_type,
        payload,
        instance_id=inst["id"],
        step_key=step_key,
        task_id=task_id,
        run_at=run_at,
        delay_ms=delay_ms,
        idempotency_key=f"{job_type}:{key}",
        trace_id=inst["trace_id"],
        later=True,
    )


def wake(conn: Connection, inst: dict, wake_kind: str, *, key: str, run_at: Any, step_key: str | None = None,
         **payload: Any) -> None:  # fmt: skip
    """A ``delay_wake`` job (timer, signal timeout / expiry, poll round, task retry, deadline, cancel settle)."""
    job(
        conn,
        inst,
        JobType.DELAY_WAKE,
        {"wake": wake_kind, **payload},
        key=key,
        step_key=step_key,
        run_at=run_at,
    )


def create_task(
    conn: Connection,
    inst: dict,
    step_id: str,
    step_key: str,
    activation_id: str,
    queue: str,
    task_input: Any,
    *,
    attempt: int = 1,
    timeout_seconds: int = DEFAULT_TASK_TIMEOUT_SECONDS,
    poll_round: int | None = None,
    compensation_of_output: str | None = None,
    purpose: str = "STEP",
) -> str:
    """A task on its queue plus the ``task_timeout`` job that enforces its deadline. A compensation
    task's input also carries the compensated activation's output (``compensation_of_output``: the
    output as JSON text, ``None`` for SQL NULL)."""
    task_id = new_id()
    input_sql = "CAST(:input AS jsonb)"
    if purpose == "COMPENSATION":
        input_sql += " || jsonb_build_object('output', COALESCE(CAST(:output AS jsonb), 'null'::jsonb))"
    task_moves.insert(
        conn,
        {
            "id": task_id,
            "ns": inst["namespace_id"],
            "inst": inst["id"],
            "step": step_id,
            "key": step_key,
            "act": activation_id,
            "queue": queue,
            "input": jdump(task_input),
            "attempt": attempt,
            "round": poll_round,
            "timeout": timeout_seconds,
            "purpose": purpose,
            "output": compensation_of_output,
        },
        input_sql=input_sql,
    )
    # due at the task's deadline: now() + timeout in the same transaction (now() is its start)
    job(conn, inst, JobType.TASK_TIMEOUT, {"task_id": task_id}, key=task_id, step_key=step_key,
        task_id=task_id, delay_ms=timeout_seconds * 1000)  # fmt: skip
    return task_id


def step_task(conn: Connection, inst: dict, step: dict, spec: dict, task_input: Any, *, attempt: int,
              poll_round: int | None = None) -> str:  # fmt: skip
    """The task of attempt ``attempt`` (and POLL round ``poll_round``) of the step's current activation,
    on the step's queue with the step's timeout; with a ``dispatch`` target, its ``external_dispatch`` job."""
    task_id = create_task(
        conn,
        inst,
        step["id"],
        step["key"],
        step["activation_id"],
        spec["queue"],
        task_input,
        attempt=attempt,
        timeout_seconds=spec.get("timeout_seconds", DEFAULT_TASK_TIMEOUT_SECONDS),
        poll_round=poll_round,
    )
    if spec.get("dispatch"):  # an external approval system hears of every attempt's task
        job(conn, inst, JobType.EXTERNAL_DISPATCH, {"task_id": task_id}, key=task_id, step_key=step["key"],
            task_id=task_id)  # fmt: skip
    return task_id


def cancel_task_timeout(conn: Connection, task_id: str) -> None:
    """A task settled before its deadline: its ``task_timeout`` job has nothing left to do."""
    rows = run(
        conn,
        "SELECT id FROM workflow_jobs WHERE task_id = :t AND type = 'task_timeout' "
        "AND status IN ('pending', 'paused') ORDER BY id",
        {"t": task_id},
    ).all()
    for (job_id,) in rows:
        ledger_moves.cancel_job(conn, job_id, "the task settled before its deadline")
