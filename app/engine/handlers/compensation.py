"""``compensation_action`` jobs (X-AUTO, W-CTL-3): job *k* of a stopping instance's compensation chain
(``app.engine.stopping``) creates the compensation task of ``plan[k]`` on its declared queue, with a
``task_timeout`` job for its deadline. The chain moves on only when that task completed
(``stopping.compensation_task_ended``), so compensation *k+1* never starts before compensation *k* ended.
The write goes through an effect receipt: a retried job never creates a second task."""

from __future__ import annotations

from sqlalchemy import Connection

from app.engine import audit_entries, jobs_and_tasks
from app.engine.decide import stopping as decide
from app.engine.decide.model import Ignore
from app.engine.handlers.common import run_locked_once
from app.engine.snapshot import inst_model
from app.engine.transitions import instance_moves
from app.ledger import handlers
from app.ledger.context import JobContext
from app.sql import query, run

_COMPENSATION_STEPS_OUTPUTS = query(
    "compensation_steps_outputs",
    "SELECT s.id AS step_id, a.output::text AS output FROM workflow_steps s "
    "JOIN workflow_all_activations a ON a.step_id = s.id WHERE s.instance_id = :i AND s.key = :k AND a.id = :a",
)


def create_compensation_task(conn: Connection, inst: dict, item: dict, index: int) -> str:
    row = run(
        conn,
        _COMPENSATION_STEPS_OUTPUTS,
        {"i": inst["id"], "k": item["step_key"], "a": item["activation_id"]},
    ).first()
    task_input = {
        "compensate": item["step_key"],
        "workflow_id": inst["id"],
        "activation_id": item["activation_id"],
        "order": index + 1,
    }
    return jobs_and_tasks.create_task(
        conn,
        inst,
        row.step_id,
        item["step_key"],
        item["activation_id"],
        item["queue"],
        task_input,
        timeout_seconds=jobs_and_tasks.COMPENSATION_TASK_SECONDS,
        purpose="COMPENSATION",
        compensation_of_output=row.output,
    )


@handlers.register("compensation_action")
def compensation_action(ctx: JobContext):
    index = int((ctx.payload or {}).get("index", 0))

    def write(conn: Connection, inst: dict) -> dict:
        item = decide.compensation_issue(inst_model(inst), index)
        if isinstance(item, Ignore):
            return {"skipped": item.reason}
        task_id = create_compensation_task(conn, inst, item, index)
        instance_moves.set_compensation_task(conn, inst["id"], task_id)
        audit_entries.advance(
            conn,
            inst,
            "workflow.compensation.issued",
            target_type="step",
            target_id=item["step_key"],
            after={
                "step_key": item["step_key"],
                "task_id": task_id,
                "queue": item["queue"],
                "order": index + 1,
            },
        )
        return {"task_id": task_id, "step_key": item["step_key"]}

    return run_locked_once(ctx, write, step="compensate")
