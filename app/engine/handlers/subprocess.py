"""``subprocess_spawn`` starts a SUBWORKFLOW step's child (pinned version, same trace id);
``subprocess_join`` completes the parent step from the child's outcome."""

from __future__ import annotations

from sqlalchemy import Connection, text

from app.engine import instances, oplog, steps
from app.engine.handlers.common import run_advance, step_of_activation
from app.engine.store import MISSING, read_instance, read_step, step_specs, version_document
from app.errors import InvalidArgument, NotFound
from app.ledger import handlers
from app.ledger.context import JobContext


@handlers.register("subprocess_spawn")
def subprocess_spawn(ctx: JobContext):  # noqa: ANN201
    activation_id = (ctx.payload or {})["activation_id"]

    def write(conn: Connection, inst: dict) -> dict:
        step = step_of_activation(conn, activation_id)
        if step is None or step["state"] != "ACTIVE" or step["child_instance_id"]:
            return {"skipped": "the step no longer waits for a child"}
        spec = step_specs(version_document(conn, inst["definition_version_id"]))[step["key"]]
        body = {
            "definition_id": spec["definition_id"],
            "version": spec["version"],
            "input": step["act_input"] if step["act_input"] is not MISSING else {},
        }
        try:
            with conn.begin_nested():
                child = instances.start_workflow(
                    conn,
                    inst["namespace_id"],
                    body,
                    trace_id=inst["trace_id"],
                    parent=(inst["id"], step["key"]),
                    on_created=lambda c, created: oplog.advance(
                        c,
                        created,
                        "workflow.start",
                        after={**instances.instance_view(created), "parent_step_key": step["key"]},
                    ),
                )
        except (InvalidArgument, NotFound) as exc:
            steps.fail_step(conn, inst["id"], step, {"code": "CHILD_START_REJECTED", "message": exc.message})
            return {"rejected": exc.message}
        conn.execute(
            text("UPDATE workflow_activations SET child_instance_id = :c WHERE id = :a"),
            {"c": child["id"], "a": activation_id},
        )
        conn.execute(
            text("UPDATE workflow_steps SET revision = revision + 1, updated_at = now() WHERE id = :id"),
            {"id": step["id"]},
        )
        conn.execute(
            text("UPDATE workflow_instances SET revision = revision + 1, updated_at = now() WHERE id = :id"),
            {"id": inst["id"]},
        )
        return {"child_id": child["id"]}

    return run_advance(ctx, write)


@handlers.register("subprocess_join")
def subprocess_join(ctx: JobContext):  # noqa: ANN201
    child_id = (ctx.payload or {})["child_id"]

    def write(conn: Connection, inst: dict) -> dict:
        child = read_instance(conn, child_id)
        step = read_step(conn, inst["id"], ctx.step_key or child["parent_step_key"])
        if step is None or step["state"] != "ACTIVE" or step["child_instance_id"] != child_id:
            return {"skipped": "the parent step no longer waits for this child"}
        if child["state"] == "SUCCEEDED":
            steps.complete_step(
                conn, inst["id"], step, child["output"] if child["output"] is not MISSING else None
            )
            return {"joined": child_id, "state": "SUCCEEDED"}
        if child["state"] in ("FAILED", "CANCELLED"):
            steps.fail_step(
                conn,
                inst["id"],
                step,
                {"code": "CHILD_FAILED", "child_workflow_id": child_id, "child_state": child["state"]},
            )
            return {"joined": child_id, "state": child["state"]}
        return {"skipped": "the child has not finished"}

    return run_advance(ctx, write)
