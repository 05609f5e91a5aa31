"""``task_timeout`` jobs: an open task past its deadline times out; the step's retry policy (TASK)
or its round budget (POLL) decides what comes next (``advance.task_ended``)."""

from __future__ import annotations

from sqlalchemy import Connection

from app.engine import tasks
from app.engine.handlers.common import bind, run_advance
from app.ledger import handlers
from app.ledger.context import JobContext
from app.sql import run


@handlers.register("task_timeout")
def task_timeout(ctx: JobContext):  # noqa: ANN201
    task_id = str((ctx.payload or {}).get("task_id") or ctx.task_id)

    def write(conn: Connection, inst: dict) -> dict:
        owner = run(conn, "SELECT instance_id FROM workflow_tasks WHERE id = :id", {"id": task_id}).scalar()
        bind("task", task_id, owner, inst["id"])
        if not tasks.time_out(conn, inst, task_id):
            return {"skipped": "the task was settled before its deadline"}
        return {"timed_out": task_id}

    return run_advance(ctx, write)
