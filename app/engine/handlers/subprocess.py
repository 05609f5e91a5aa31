"""``subprocess_spawn`` starts a SUBWORKFLOW step's child (pinned version, same trace id);
``subprocess_join`` completes or fails the parent step from the child's outcome (``decide.wakes``).

A SUBWORKFLOW step with ``for_each`` (a fan-out, ``decide.fanout``) has one child per element: its spawn
starts the first ``max_parallel`` children, and each child's join counts the activation's children and
starts the next elements, or settles the step (the children's outputs in element order, or the first
failed element). New children start only while the parent runs (not paused, not in review, no cancel);
a resume or a review left enqueues the spawn again (``driver.fanout_top_up``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from app.engine import activation, audit_entries, driver, instances, mapping, snapshot
from app.engine.decide import fanout as decide_fanout
from app.engine.decide import wakes as decide
from app.engine.decide.model import CompleteStep, FailStep, Ignore
from app.engine.handlers.common import bind, run_locked_once, step_of_activation
from app.engine.row_access import MISSING, read_instance, read_step, step_specs, version_document
from app.engine.snapshot import step_model
from app.engine.states import InstanceState, StepState
from app.engine.transitions import instance_moves, step_moves
from app.errors import InvalidArgument, LimitExceeded, NotFound, QuotaExceeded
from app.ledger import handlers
from app.ledger.context import JobContext
from app.ledger.outcome import payload_id

# the parent's states in which a fan-out starts new children (paused, review or a cancel hold them)
OPEN_TO_START = (InstanceState.RUNNING, InstanceState.WAITING)


@handlers.register("subprocess_spawn")
def subprocess_spawn(ctx: JobContext):
    activation_id = payload_id(ctx.payload, "activation_id")

    def write(conn: Connection, inst: dict) -> dict:
        step = step_of_activation(conn, activation_id, inst["id"])
        if step is None or step["state"] != StepState.ACTIVE or step["child_instance_id"]:
            return {"skipped": "the step no longer waits for a child"}
        spec = step_specs(version_document(conn, inst["definition_version_id"]))[step["key"]]
        if "for_each" in spec:
            return fan_out(conn, inst, step, spec)
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
                    on_created=lambda c, created: audit_entries.advance(
                        c,
                        created,
                        "workflow.start",
                        after={**instances.instance_view(created), "parent_step_key": step["key"]},
                    ),
                )
        except (InvalidArgument, NotFound) as exc:
            driver.fail_step(conn, inst["id"], step, {"code": "CHILD_START_REJECTED", "message": exc.message})
            return {"rejected": exc.message}
        step_moves.set_child(conn, step, child["id"])
        instance_moves.touch(conn, inst["id"])
        return {"child_id": child["id"]}

    return run_locked_once(ctx, write)


@handlers.register("subprocess_join")
def subprocess_join(ctx: JobContext):
    child_id = payload_id(ctx.payload, "child_id")

    def write(conn: Connection, inst: dict) -> dict:
        child = read_instance(conn, child_id)
        bind("child workflow", child_id, child["parent_instance_id"] or "", inst["id"])
        step = read_step(conn, inst["id"], child["parent_step_key"])
        if child["parent_activation_id"] is not None:  # an element of a fan-out
            if step is None or step["activation_id"] != child["parent_activation_id"]:
                return {"skipped": "the child belongs to an older activation of its step"}
            if step["state"] != StepState.ACTIVE:
                return {"skipped": f"the step is {step['state']}"}
            spec = step_specs(version_document(conn, inst["definition_version_id"]))[step["key"]]
            return {"joined": child_id, "state": child["state"], **fan_out(conn, inst, step, spec)}
        output = child["output"] if child["output"] is not MISSING else None
        verdict = decide.child_ended(
            step_model(step), child_id, step["child_instance_id"] if step else None, child["state"], output
        )
        if isinstance(verdict, Ignore):
            return {"skipped": verdict.reason}
        assert step is not None  # child_ended answers Ignore without a step
        driver.follow(conn, inst["id"], step, verdict)
        return {"joined": child_id, "state": child["state"]}

    return run_locked_once(ctx, write)


def fan_out(conn: Connection, inst: dict, step: dict, spec: dict) -> dict:
    """The children of a fan-out step's current activation: start the elements its free places allow, or
    settle the step once every element ended (``decide.fanout.plan``)."""
    act = step["activation_id"]
    items = step["act_input"]["items"]
    progress = snapshot.fanout_child_progress(conn, act, len(items))
    verdict = decide_fanout.plan(spec, progress, None)
    if isinstance(verdict, CompleteStep):
        outputs: list[Any] = [None] * len(items)
        for c in snapshot.fanout_children(conn, act):
            if c["state"] == InstanceState.SUCCEEDED and c["element"] < len(items):
                outputs[c["element"]] = c["output"]
        driver.complete_step(conn, inst["id"], step, outputs)
        return {"step": "succeeded"}
    if isinstance(verdict, FailStep):
        first = decide_fanout.first_failure(
            [
                decide_fanout.Element(
                    c["element"], decide_fanout.child_state(c["state"]), 1, c["id"], c["error"]
                )
                for c in snapshot.fanout_children(conn, act)
            ]
        )
        if "task_id" in first:
            first["child_workflow_id"] = first.pop("task_id")
        driver.fail_step(conn, inst["id"], step, {**verdict.error, **first})
        return {"step": "failed"}
    assert isinstance(verdict, decide_fanout.StartElements)
    if not verdict.indexes:
        return {"started": 0}
    if inst["paused"] or inst["cancel_requested_at"] is not None or inst["state"] not in OPEN_TO_START:
        return {"started": 0, "held": inst["state"] + (" (paused)" if inst["paused"] else "")}
    mctx = snapshot.mapping_context(conn, inst)
    started = 0
    for i in verdict.indexes:
        try:
            body = {
                "definition_id": spec["definition_id"],
                "version": spec["version"],
                "input": activation.element_input(spec, mctx, items, i),
            }
            with conn.begin_nested():
                instances.start_workflow(
                    conn,
                    inst["namespace_id"],
                    body,
                    trace_id=inst["trace_id"],
                    parent=(inst["id"], step["key"]),
                    element=(act, i),
                    on_created=_audit_start(step["key"], i),
                )
        except (QuotaExceeded, LimitExceeded):
            # the namespace is full: the children started so far stay; the next child's end (its join)
            # tries the next elements again. With none in flight nothing would: the job retries later.
            if started == 0 and verdict.indexes[0] == i and progress.running == 0:
                raise
            break
        except mapping.MappingTooLarge as exc:
            driver.fail_step(conn, inst["id"], step, {**exc.error(), "element": i})
            return {"step": "failed"}
        except (InvalidArgument, NotFound) as exc:
            driver.fail_step(
                conn,
                inst["id"],
                step,
                {"code": "CHILD_START_REJECTED", "message": f"element {i}: {exc.message}", "element": i},
            )
            return {"step": "failed"}
        started += 1
    if started:
        instance_moves.touch(conn, inst["id"])
    return {"started": started}


def _audit_start(step_key: str, element: int) -> Callable[[Connection, dict], None]:
    def audit(conn: Connection, created: dict) -> None:
        after = {**instances.instance_view(created), "parent_step_key": step_key, "element": element}
        audit_entries.advance(conn, created, "workflow.start", after=after)

    return audit
