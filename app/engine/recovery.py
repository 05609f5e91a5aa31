"""Recovery of NEEDS_REVIEW steps and instances by an operator (X-RECOVER), with reason and
evidence_ref, audited by the caller.

A step can be resolved when it is NEEDS_REVIEW, or when its instance is NEEDS_REVIEW and the step
is unfinished (ACTIVE, WAITING), FAILED or CANCELLED. Actions:

- RETRY_STEP: a new activation (sequence + 1) of the step. Its time budget never grows (W-STEP-5):
  a wait keeps the previous activation's wait deadline, tasks and jobs never outlive the workflow
  deadline (which itself never moves). Not allowed while a cancel is settling.
- SUCCEED_STEP: the current activation succeeds with ``output`` (explicit null allowed).
- FAIL_STEP: the current activation fails (FAILED_BY_OPERATOR); without a pending cancel the
  workflow fails (stop_kind FAILURE).

When no step is left in review the instance leaves NEEDS_REVIEW: back to CANCELLING (a pending
cancel then finishes) or RUNNING/WAITING (successors start)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine import activation, advance, mapping, snapshot, stopping
from app.engine.decide.stopping import chain_running
from app.engine.states import TERMINAL, InstanceState, StepState
from app.engine.store import (
    MISSING,
    lock_instance,
    read_instance,
    read_step,
    read_wait,
    step_specs,
    version_document,
)
from app.engine.transitions import instance_moves, step_moves, task_moves, wait_moves
from app.errors import NotFound, StateConflict
from app.sql import run

ACTIONS = ("RETRY_STEP", "SUCCEED_STEP", "FAIL_STEP", "RESOLVE_INSTANCE")
RESOLUTIONS = ("CONTINUE", "CANCEL", "FAIL")
RESOLVABLE = step_moves.RESOLVABLE


def recover(conn: Connection, instance_id: str, req: dict) -> tuple[dict, dict, dict]:
    """Apply one recovery action; returns (instance before, instance after, step summary)."""
    inst = lock_instance(conn, instance_id)
    step = read_step(conn, instance_id, req["step_key"])
    if step is None:
        raise NotFound("step not found")
    if inst["state"] in TERMINAL:
        raise StateConflict(f"the workflow is {inst['state']}")
    if chain_running(inst["compensation"]):
        raise StateConflict(
            "the workflow is stopping and its compensations are under way: steps are no longer "
            "recovered; resolve the instance (RESOLVE_INSTANCE) when it is in review"
        )
    if not (
        step["state"] == "NEEDS_REVIEW" or (inst["state"] == "NEEDS_REVIEW" and step["state"] in RESOLVABLE)
    ):
        raise StateConflict(
            f"step {step['key']!r} is {step['state']} in a {inst['state']} workflow: recovery resolves "
            "NEEDS_REVIEW steps and instances"
        )
    if not step["activation_id"]:
        raise StateConflict(f"step {step['key']!r} was never activated")
    action = req["action"]
    if action == "RETRY_STEP":
        if inst["cancel_requested_at"] is not None:
            raise StateConflict("a cancel is pending: the step cannot be retried")
        _retry(conn, inst, step)
    elif action == "SUCCEED_STEP":
        _close(conn, step, StepState.SUCCEEDED, output=req["output"])
    else:
        _close(conn, step, StepState.FAILED, error={"code": "FAILED_BY_OPERATOR", "message": req["reason"]})
    instance_moves.touch(conn, instance_id)
    _leave_review(
        conn, instance_id, failed_step=step if action == "FAIL_STEP" else None, reason=req["reason"]
    )
    after_step = read_step(conn, instance_id, step["key"])
    assert after_step is not None  # the step read above
    summary = {
        "step_key": step["key"],
        "state": after_step["state"],
        "activation_sequence": after_step["activation_sequence"],
        "activation_id": after_step["activation_id"],
    }
    return inst, read_instance(conn, instance_id), summary


def _stop_activation_work(conn: Connection, activation_id: str) -> None:
    task_moves.cancel_open(conn, activation_id=activation_id, step_only=True)
    wait_moves.cancel_open(conn, activation_id=activation_id)


def _close(conn: Connection, step: dict, state: str, *, output: Any = MISSING, error: Any = MISSING) -> None:
    _stop_activation_work(conn, step["activation_id"])
    step_moves.close(conn, step, state, output=output, error=error)


def _retry(conn: Connection, inst: dict, step: dict) -> None:
    old_wait = read_wait(conn, step["activation_id"])
    _stop_activation_work(conn, step["activation_id"])
    step_moves.end_activation_for_retry(conn, step)
    spec = step_specs(version_document(conn, inst["definition_version_id"]))[step["key"]]
    try:
        activation.activate(
            conn, inst, step, spec, snapshot.mapping_context(conn, inst), allowed=step_moves.RESOLVABLE
        )
    except mapping.MappingTooLarge as exc:  # nothing was written: the retry is refused as a whole
        raise StateConflict(f"the step cannot be retried: {exc.reason}") from None
    new = read_step(conn, inst["id"], step["key"])
    assert new is not None  # the step just retried
    act = new["activation_id"]
    if old_wait is not None and old_wait["deadline_at"] is not None:
        run(
            conn,
            "UPDATE workflow_waits SET deadline_at = LEAST(deadline_at, :d) WHERE activation_id = :a",
            {"a": act, "d": old_wait["deadline_at"]},
        )
    cap = run(
        conn,
        "SELECT COALESCE(min(deadline_at), :d) FROM workflow_waits WHERE activation_id = :a",
        {"a": act, "d": inst["deadline_at"]},
    ).scalar_one()
    run(
        conn,
        "UPDATE workflow_tasks SET deadline_at = LEAST(deadline_at, :d) WHERE activation_id = :a "
        "AND state IN ('PENDING', 'CLAIMED')",
        {"a": act, "d": inst["deadline_at"]},
    )
    run(
        conn,
        "UPDATE workflow_jobs j SET run_at = LEAST(j.run_at, :cap) WHERE j.instance_id = :i AND j.status = 'pending' "
        "AND (j.payload->>'activation_id' = :a OR j.task_id IN (SELECT id FROM workflow_tasks WHERE activation_id = :a))",
        {"i": inst["id"], "a": act, "cap": min(cap, inst["deadline_at"])},
    )


def _leave_review(conn: Connection, iid: str, *, failed_step: dict | None, reason: str) -> None:
    inst = read_instance(conn, iid)
    left = run(
        conn,
        "SELECT count(*) FROM workflow_steps WHERE instance_id = :id AND state = 'NEEDS_REVIEW'",
        {"id": iid},
    ).scalar_one()
    cancelling = inst["cancel_requested_at"] is not None
    if failed_step is not None and not cancelling:
        stopping.stop(
            conn,
            inst,
            "FAILED",
            error={"step_key": failed_step["key"], "code": "FAILED_BY_OPERATOR", "message": reason},
        )
        return
    if left or inst["state"] not in instance_moves.REVIEWABLE:
        return
    instance_moves.leave_review(
        conn, iid, InstanceState.CANCELLING if cancelling else InstanceState.RUNNING, bump=False
    )
    if cancelling:
        stopping.settle_cancel(conn, iid)
    else:
        advance.settle_progress(conn, iid)
