"""``task_timeout`` jobs: one per instance (``work.arm_task_deadlines``) times out every open task of its
instance past its deadline and arms itself again for the next; the step's retry policy (TASK) or its
round budget (POLL) decides what comes next (``advance.task_ended``). A job naming one task (``task_id``,
enqueued before migration 0018_i27) times out that task only."""

from __future__ import annotations

from sqlalchemy import Connection

from app.engine import task_protocol
from app.engine.handlers.common import bind, run_advance
from app.ledger import handlers
from app.ledger.context import JobContext
from app.sql import run


@handlers.register("task_timeout")
def task_timeout(ctx: JobContext):
    named = (ctx.payload or {}).get("task_id") or ctx.task_id
    if not named:
        return run_advance(ctx, task_protocol.time_out_due)
    task_id = str(named)

    def write(conn: Connection, inst: dict) -> dict:
        owner = run(conn, "SELECT instance_id FROM workflow_tasks WHERE id = :id", {"id": task_id}).scalar()
        bind("task", task_id, owner, inst["id"])
        if not task_protocol.time_out(conn, inst, task_id):
            return {"skipped": "the task was settled before its deadline"}
        return {"timed_out": task_id}

    return run_advance(ctx, write)
