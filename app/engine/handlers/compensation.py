"""``compensation_action`` jobs (X-AUTO, W-CTL-3): job *k* of a stopping instance's compensation chain
(``app.engine.saga``) creates the compensation task of ``plan[k]`` on its declared queue, with a
``task_timeout`` job for its deadline. The chain moves on only when that task completed
(``saga.on_task_result``), so compensation *k+1* never starts before compensation *k* ended.
The write goes through an effect receipt: a retried job never creates a second task."""

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
    deadline = conn.execute(
        text(
            """
INSERT INTO workflow_tasks (id, namespace_id, instance_id, step_id, step_key, activation_id, queue, input,
    attempt, deadline_at, purpose)
VALUES (:id, :ns, :inst, :step, :key, :act, :queue, CAST(:input AS jsonb) || jsonb_build_object('output',
    COALESCE(CAST(:output AS jsonb), 'null'::jsonb)), 1, now() + make_interval(secs => :secs), 'COMPENSATION')
RETURNING deadline_at
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
    ).scalar_one()
    enqueue(
        conn,
        "task_timeout",
        {"task_id": task_id},
        instance_id=inst["id"],
        step_key=item["step_key"],
        task_id=task_id,
        run_at=deadline,
        idempotency_key=f"task_timeout:{task_id}",
        trace_id=inst["trace_id"],
    )
    return task_id


@handlers.register("compensation_action")
def compensation_action(ctx: JobContext):  # noqa: ANN201
    index = int((ctx.payload or {}).get("index", 0))
    instance_id = ctx.instance_id
    if not instance_id:
        return Skip("job has no instance")
    ctx.lock_first = lambda conn: lock_instance(conn, instance_id)

    def write(conn: Connection) -> dict:
        inst = lock_instance(conn, instance_id)
        comp = inst["compensation"] or {}
        if comp.get("state") != "RUNNING" or comp.get("index") != index or comp.get("task_id"):
            return {"skipped": f"compensation {index + 1} is not the one the chain waits to issue"}
        item = comp["plan"][index]
        task_id = create_compensation_task(conn, inst, item, index)
        conn.execute(
            text(
                "UPDATE workflow_instances SET compensation = compensation || jsonb_build_object('task_id', "
                "CAST(:t AS text)), revision = revision + 1, updated_at = now() WHERE id = :id"
            ),
            {"id": instance_id, "t": task_id},
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

    result = ctx.effect("compensate", write)
    if isinstance(result, dict) and "skipped" in result:
        return Skip(str(result["skipped"]))
    return result
