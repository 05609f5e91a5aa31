"""``subprocess_spawn`` starts a SUBWORKFLOW step's child (pinned version, same trace id);
``subprocess_join`` completes or fails the parent step from the child's outcome (``decide.wakes``)."""

from __future__ import annotations

from sqlalchemy import Connection

from app.engine import advance, instances, oplog
from app.engine.decide import wakes as decide
from app.engine.decide.model import Ignore
from app.engine.handlers.common import bind, run_advance, step_of_activation
from app.engine.snapshot import step_model
from app.engine.states import StepState
from app.engine.store import MISSING, read_instance, read_step, step_specs, version_document
from app.engine.transitions import instance_moves, step_moves
from app.errors import InvalidArgument, NotFound
from app.ledger import handlers
from app.ledger.context import JobContext
from app.ledger.outcome import payload_id


@handlers.register("subprocess_spawn")
def subprocess_spawn(ctx: JobContext):
    activation_id = payload_id(ctx.payload, "activation_id")

    def write(conn: Connection, inst: dict) -> dict:
        step = step_of_activation(conn, activation_id, inst["id"])
        if step is None or step["state"] != StepState.ACTIVE or step["child_instance_id"]:
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
            advance.fail_step(
                conn, inst["id"], step, {"code": "CHILD_START_REJECTED", "message": exc.message}
            )
            return {"rejected": exc.message}
        step_moves.set_child(conn, step, child["id"])
        instance_moves.touch(conn, inst["id"])
        return {"child_id": child["id"]}

    return run_advance(ctx, write)


@handlers.register("subprocess_join")
def subprocess_join(ctx: JobContext):
    child_id = payload_id(ctx.payload, "child_id")

    def write(conn: Connection, inst: dict) -> dict:
        child = read_instance(conn, child_id)
        bind("child workflow", child_id, child["parent_instance_id"] or "", inst["id"])
        step = read_step(conn, inst["id"], child["parent_step_key"])
        output = child["output"] if child["output"] is not MISSING else None
        verdict = decide.child_ended(
            step_model(step), child_id, step["child_instance_id"] if step else None, child["state"], output
        )
        if isinstance(verdict, Ignore):
            return {"skipped": verdict.reason}
        assert step is not None  # child_ended answers Ignore without a step
        advance.follow(conn, inst["id"], step, verdict)
        return {"joined": child_id, "state": child["state"]}

    return run_advance(ctx, write)
