"""``delay_wake`` jobs: a TIMER step is due, a SIGNAL wait timed out, a POLL round is due, a TASK step's
retry backoff passed, or an instance's overall deadline passed (then it FAILS with stop_kind FAILURE)."""

from __future__ import annotations

from sqlalchemy import Connection, text

from app.engine import poll, steps
from app.engine.handlers.common import run_advance, step_of_activation
from app.engine.store import MISSING, step_specs, version_document
from app.ledger import handlers
from app.ledger.context import JobContext


def _timer(conn: Connection, inst: dict, activation_id: str) -> dict:
    step = step_of_activation(conn, activation_id)
    if step is None or step["state"] != "WAITING":
        return {"skipped": "the timer's activation is no longer current"}
    due = conn.execute(
        text(
            "UPDATE workflow_waits SET state = 'RESOLVED', resolved_at = now() "
            "WHERE activation_id = :a AND state = 'WAITING' AND deadline_at <= now() RETURNING id"
        ),
        {"a": activation_id},
    ).first()
    if due is None:
        return {"skipped": "the timer is not due or already resolved"}
    steps.complete_step(conn, inst["id"], step, MISSING)
    return {"fired": step["key"]}


def _signal_timeout(conn: Connection, inst: dict, activation_id: str) -> dict:
    step = step_of_activation(conn, activation_id)
    if step is None or step["state"] != "WAITING":
        return {"skipped": "the wait's activation is no longer current"}
    expired = conn.execute(
        text(
            "UPDATE workflow_waits SET state = 'EXPIRED', resolved_at = now() "
            "WHERE activation_id = :a AND state = 'WAITING' AND deadline_at <= now() RETURNING id"
        ),
        {"a": activation_id},
    ).first()
    if expired is None:
        return {"skipped": "the wait was resolved or is not due"}
    steps.fail_step(
        conn, inst["id"], step, {"code": "SIGNAL_TIMEOUT", "message": "no signal before the deadline"}
    )
    return {"expired": step["key"]}


def _poll(conn: Connection, inst: dict, activation_id: str, round_no: int) -> dict:
    step = step_of_activation(conn, activation_id)
    if step is None:
        return {"skipped": "the poll's activation is no longer current"}
    spec = step_specs(version_document(conn, inst["definition_version_id"]))[step["key"]]
    if not poll.wake(conn, inst, step, spec, round_no):
        return {"skipped": f"round {round_no} is not due"}
    return {"round": round_no}


def _task_retry(conn: Connection, inst: dict, activation_id: str, attempt: int) -> dict:
    """A TASK step's retry backoff passed: create attempt ``attempt`` if the step still waits for it."""
    from app.engine import tasks

    step = step_of_activation(conn, activation_id)
    if (
        step is None
        or step["kind"] != "TASK"
        or step["state"] != "WAITING"
        or step["task_attempts"] + 1 != attempt
    ):
        return {"skipped": f"attempt {attempt} is no longer awaited"}
    spec = step_specs(version_document(conn, inst["definition_version_id"]))[step["key"]]
    task_id = tasks.start_next_attempt(conn, inst, step, spec)
    steps.after_change(conn, inst["id"])
    return {"attempt": attempt, "task_id": task_id}


def _deadline(conn: Connection, inst: dict) -> dict:
    if not conn.execute(text("SELECT :d <= now()"), {"d": inst["deadline_at"]}).scalar():
        return {"skipped": "deadline not reached"}
    from app.engine import saga

    if inst["stop_requested_at"] is not None:
        return {"skipped": "the workflow is already stopping"}
    saga.stop(
        conn, inst, "FAILED", error={"code": "DEADLINE_EXCEEDED", "message": "the workflow deadline passed"}
    )
    return {"failed": "DEADLINE_EXCEEDED"}


@handlers.register("delay_wake")
def delay_wake(ctx: JobContext):  # noqa: ANN201
    p = ctx.payload or {}
    wake = p.get("wake")

    def write(conn: Connection, inst: dict) -> dict:
        if wake == "timer":
            return _timer(conn, inst, p["activation_id"])
        if wake == "poll":
            return _poll(conn, inst, p["activation_id"], int(p["round"]))
        if wake == "signal_timeout":
            return _signal_timeout(conn, inst, p["activation_id"])
        if wake == "deadline":
            return _deadline(conn, inst)
        if wake == "task_retry":
            return _task_retry(conn, inst, p["activation_id"], int(p["attempt"]))
        from app.engine import wakes  # control / signal wakes (signal_expiry, cancel_settle)

        if wake in wakes.WAKES:
            return wakes.WAKES[wake](conn, inst, p)
        return {"skipped": f"unknown wake {wake!r}"}

    return run_advance(ctx, write)
