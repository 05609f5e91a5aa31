"""The units of work the engine issues, inside the caller's transaction (instance row locked first):
ledger jobs (one idempotency key per engine event, so a replayed decision enqueues nothing twice)
and tasks. An instance's deadlines (its own and its open tasks') are enforced by ONE job per instance,
its watch (type ``task_timeout``, ``arm_watch``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.db import tx
from app.engine.documents import DEFAULT_TASK_TIMEOUT_SECONDS
from app.engine.row_access import jdump
from app.engine.states import task_open_sql
from app.engine.transitions import task_moves
from app.engine.transitions.step_moves import Activation
from app.ids import new_id
from app.ledger.enqueue import arm, enqueue
from app.ledger.states import JobType

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
    into: Activation | None = None,
) -> None:
    """An engine job of ``inst`` with idempotency key ``{job_type}:{key}`` and the instance's trace, due
    at ``run_at`` or ``delay_ms`` from now (database time). ``into``: its row goes with the step's first
    activation (``step_moves.activate``) instead of a statement of its own."""
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
        into=None if into is None else into.jobs,
    )


def wake(
    conn: Connection,
    inst: dict,
    wake_kind: str,
    *,
    key: str,
    run_at: Any,
    step_key: str | None = None,
    into: Activation | None = None,
    **payload: Any,
) -> None:
    """A ``delay_wake`` job (timer, signal timeout / expiry, poll round, task retry, cancel settle)."""
    job(
        conn,
        inst,
        JobType.DELAY_WAKE,
        {"wake": wake_kind, **payload},
        key=key,
        step_key=step_key,
        run_at=run_at,
        into=into,
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
    into: Activation | None = None,
) -> str:
    """A task on its queue; its instance's watch is due no later than its deadline. A compensation
    task's input also carries the compensated activation's output (``compensation_of_output``: the
    output as JSON text, ``None`` for SQL NULL)."""
    task_id = new_id()
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
            "instance_created_at": inst["created_at"],
        },
        into=None if into is None else into.tasks,
    )
    arm_watch(conn, inst, timeout_seconds, into=into)
    return task_id


def element_tasks(
    conn: Connection, inst: dict, step: dict, spec: dict, inputs: list[tuple[int, Any]], *, attempt: int
) -> list[str]:
    """The tasks of fan-out elements (``inputs``: ``(index, task input)``) of the step's current
    activation, attempt ``attempt``, on the step's queue with the step's timeout, in one statement
    (a fan-out step has no ``dispatch``); the instance's watch is due no later than their deadline."""
    if not inputs:
        return []
    timeout = spec.get("timeout_seconds", DEFAULT_TASK_TIMEOUT_SECONDS)
    ids = [new_id() for _ in inputs]
    task_moves.insert_elements(
        conn,
        {
            "ns": inst["namespace_id"],
            "inst": inst["id"],
            "step": step["id"],
            "key": step["key"],
            "act": step["activation_id"],
            "queue": spec["queue"],
            "attempt": attempt,
            "timeout": timeout,
            "instance_created_at": inst["created_at"],
        },
        [
            (index, task_id, jdump(task_input))
            for (index, task_input), task_id in zip(inputs, ids, strict=True)
        ],
    )
    arm_watch(conn, inst, timeout)
    return ids


def arm_watch(conn: Connection, inst: dict, seconds: float, *, into: Activation | None = None) -> None:
    """The instance's watch is due no later than ``seconds`` from now (a task's deadline is now() + its
    timeout in the same transaction: now() is the transaction's start; the workflow deadline is
    ``deadline_at``). ONE ``task_timeout`` job per instance enforces the workflow deadline and the
    deadlines of all its open tasks (``handlers.task_timeouts``): neither the instance nor a task costs a
    job of its own, created and canceled. Asked once per transaction and instance for the earliest."""
    t = tx(conn)
    if t.watch_due.get(inst["id"], float("inf")) <= seconds:
        return
    t.watch_due[inst["id"]] = seconds
    absent = t.watch_absent
    new = inst["id"] in absent  # an instance this transaction inserted has no watch: a plain insert (with
    absent.discard(inst["id"])  # its first step's row when ``into``), not the arm's lookup, which finds none
    arm(
        conn,
        JobType.TASK_TIMEOUT,
        {},
        instance_id=inst["id"],
        delay_ms=seconds * 1000,
        trace_id=inst["trace_id"],
        absent=new,
        into=None if into is None else into.jobs,
    )


# When the watch of instance ``i`` (a row of workflow_instances) is due: the earliest deadline of its open
# tasks and, unless its stop was requested or it ended, its workflow deadline (NULL: nothing to watch).
# The watch re-arms itself with it (``handlers.task_timeouts``) and RESUME puts it there (``control``).
WATCH_DUE_SQL = f"""LEAST(
    -- its open tasks, by its index (app.engine.row_access._OPEN_WORK)
    (SELECT min(t.deadline_at) FROM workflow_tasks t
     WHERE t.instance_id = i.id AND {task_open_sql("t.state")}),
    CASE WHEN i.stop_requested_at IS NULL AND i.state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
         THEN i.deadline_at END)"""


def watch_absent(conn: Connection, instance_id: str) -> None:
    """``instance_id`` was inserted by this transaction: it has no watch yet, so the transaction's first
    ``arm_watch`` inserts one (with the first step's row: one statement) instead of sending the arm's
    lookup."""
    tx(conn).watch_absent.add(instance_id)


def watch_covers(conn: Connection, instance_id: str, seconds: float) -> None:
    """The instance's watch is known to be due no later than ``seconds`` from the transaction's ``now()``:
    an open task of it has that deadline, read under the instance's lock. Every open task's deadline is
    watched (each task arms the watch when it is created, a resume re-arms it from the open tasks, and a
    watch that fires re-arms itself from them before it ends; a watch running now re-arms after this
    transaction, under the instance's lock, from the tasks it then finds). So a later ``arm_watch`` of this
    transaction for a deadline no earlier sends nothing: a completion whose next step's task is due no
    earlier than the task it completes arms nothing (one statement, and the row lock on the watch, less
    per step)."""
    due = tx(conn).watch_due
    due[instance_id] = min(due.get(instance_id, float("inf")), seconds)


def watch_cleared(conn: Connection, instance_id: str) -> None:
    """The instance's pending watch was canceled in this transaction (its work closed): the next
    ``arm_watch`` of the transaction arms a new one, whatever it asked before."""
    tx(conn).watch_due.pop(instance_id, None)


def step_task(
    conn: Connection,
    inst: dict,
    step: dict,
    spec: dict,
    task_input: Any,
    *,
    attempt: int,
    poll_round: int | None = None,
    into: Activation | None = None,
) -> str:
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
        into=into,
    )
    if spec.get("dispatch"):  # an external approval system hears of every attempt's task
        job(
            conn,
            inst,
            JobType.EXTERNAL_DISPATCH,
            {"task_id": task_id},
            key=task_id,
            step_key=step["key"],
            task_id=task_id,
            into=into,
        )
    return task_id
