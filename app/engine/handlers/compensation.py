"""``compensation_action`` jobs (X-AUTO, W-CTL-3): after a cancel, each completed step that declares a
``compensation`` gets a compensation task on its declared queue, in reverse completion order.

The plan (steps newest-completed first) travels in the payload; job ``index`` creates the task of
``plan[index]`` and enqueues job ``index + 1`` in the same effect transaction, so the tasks appear on
their queues strictly in reverse completion order and a retried job never creates a second task."""

from __future__ import annotations

from sqlalchemy import Connection, text

from app.engine import oplog
from app.engine.store import jdump, lock_instance
from app.ids import new_id
from app.ledger import handlers
from app.ledger.context import JobContext
from app.ledger.enqueue import enqueue
from app.ledger.outcome import Skip

COMPENSATION_TASK_SECONDS = 7 * 24 * 3600


def create_compensation_task(conn: Connection, inst: dict, item: dict, index: int) -> str:
    row = conn.execute(
        text(
            "SELECT s.id AS step_id, a.output::text AS output FROM workflow_steps s "
            "JOIN workflow_activations a ON a.step_id = s.id WHERE s.instance_id = :i AND s.key = :k AND a.id = :a"
        ),
        {"i": inst["id"], "k": item["step_key"], "a": item["activation_id"]},
    ).first()
    task_id = new_id()
    task_input = {
        "compensate": item["step_key"],
        "workflow_id": inst["id"],
        "activation_id": item["activation_id"],
        "order": index + 1,
    }
    conn.execute(
        text(
            """
INSERT INTO workflow_tasks (id, namespace_id, instance_id, step_id, step_key, activation_id, queue, input,
    attempt, deadline_at, purpose)
VALUES (:id, :ns, :inst, :step, :key, :act, :queue, CAST(:input AS jsonb) || jsonb_build_object('output',
    COALESCE(CAST(:output AS jsonb), 'null'::jsonb)), 1, now() + make_interval(secs => :secs), 'COMPENSATION')
"""
        ),
        {
            "id": task_id,
            "ns": inst["namespace_id"],
            "inst": inst["id"],
            "step": row.step_id,
            "key": item["step_key"],
            "act": item["activation_id"],
            "queue": item["queue"],
            "input": jdump(task_input),
            "output": row.output,
            "secs": COMPENSATION_TASK_SECONDS,
        },
    )
    return task_id


@handlers.register("compensation_action")
def compensation_action(ctx: JobContext):  # noqa: ANN201
    p = ctx.payload or {}
    plan, index = p.get("plan") or [], int(p.get("index", 0))
    instance_id = ctx.instance_id
    if not instance_id or index >= len(plan):
        return Skip("nothing to compensate")
    ctx.lock_first = lambda conn: lock_instance(conn, instance_id)

    def write(conn: Connection) -> dict:
        inst = lock_instance(conn, instance_id)
        item = plan[index]
        task_id = create_compensation_task(conn, inst, item, index)
        if index + 1 < len(plan):
            enqueue(
                conn,
                "compensation_action",
                {"plan": plan, "index": index + 1},
                instance_id=instance_id,
                step_key=plan[index + 1]["step_key"],
                idempotency_key=f"compensation_action:{instance_id}:{index + 1}",
                trace_id=inst["trace_id"],
            )
        oplog.advance(
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

    return ctx.effect("compensate", write)
