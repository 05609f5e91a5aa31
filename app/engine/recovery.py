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
cancel then finishes) or RUNNING/WAITING (successors start).

RESOLVE_INSTANCE (``resolve_instance``): an operator resolves a NEEDS_REVIEW **instance** whose review is
not carried by a step — a job with an unknown external outcome and no step (L-PAUSE-2, W-CTL-3), or a
failed compensation (``saga``). Steps in NEEDS_REVIEW are resolved first, with the step actions.

Resolutions (with reason and evidence_ref, audited by the caller as ``workflow.recovery.resolve_instance``):

- CONTINUE — the reviewed effect is settled. Unknown outcome: the instance carries on where it was
  (RUNNING/WAITING with its successors, or its pending cancel settles). Failed compensation: it counts
  as handled by hand; the next compensation starts, or the instance ends in its final state.
- CANCEL — unknown outcome without a stop: a W-CTL cancel (in-flight tasks keep their permit, then
  compensations, then CANCELLED), the reviewed job is not checked again; with a cancel pending it is
  CONTINUE. Failed compensation: the instance ends CANCELLED now, remaining compensations abandoned.
- FAIL — unknown outcome: the instance fails (FAILED_BY_OPERATOR; compensations run first). Failed
  compensation: the instance ends FAILED now, remaining compensations abandoned.

The jobs whose outcome was unknown stay where the ledger put them (running / dead "needs
confirmation"); retrying or skipping them is the ledger operator's call (L-EFFECT-5)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine import activation, driver, mapping, snapshot, stopping
from app.engine.decide.stopping import chain_running
from app.engine.row_access import (
    MISSING,
    lock_instance,
    read_instance,
    read_step,
    read_wait,
    step_specs,
    version_document,
)
from app.engine.states import TERMINAL, InstanceState, StepState, task_open_sql
from app.engine.transitions import instance_moves, step_moves, task_moves, wait_moves
from app.errors import NotFound, StateConflict
from app.sql import query, run

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
    # a fan-out's unfinished children: the activation that waits for them ends
    stopping.stop_fanout_children(conn, activation_id, "the parent step was recovered by an operator")


def _close(conn: Connection, step: dict, state: str, *, output: Any = MISSING, error: Any = MISSING) -> None:
    _stop_activation_work(conn, step["activation_id"])
    step_moves.close(conn, step, state, output=output, error=error)


_RECOVERY_WAITS_DEADLINE_CAP = query(
    "recovery_waits_deadline_cap",
    "UPDATE workflow_waits SET deadline_at = LEAST(deadline_at, :d) WHERE activation_id = :a",
)


_RECOVERY_WAITS_NEXT_DEADLINE = query(
    "recovery_waits_next_deadline",
    "SELECT COALESCE(min(deadline_at), :d) FROM workflow_waits WHERE activation_id = :a",
)


_RECOVERY_TASKS_DEADLINE_CAP = query(
    "recovery_tasks_deadline_cap",
    # the instance's open tasks, by its index (task_open_sql)
    "UPDATE workflow_tasks SET deadline_at = LEAST(deadline_at, :d) WHERE instance_id = :i AND activation_id = :a "
    f"AND {task_open_sql()}",
)


_RECOVERY_WAKES_RUN_AT_CAP = query(
    "recovery_wakes_run_at_cap",
    # ``status::text``: a comparison no status index can serve, so the instance's own jobs are read by its
    # index, never every pending job (tests/db/test_open_tasks_plans.py; as ``instance_lock_job_fence``)
    "UPDATE workflow_jobs j SET run_at = LEAST(j.run_at, :cap) WHERE j.instance_id = :i AND j.status::text = 'pending' "
    "AND (j.payload->>'activation_id' = :a "
    "OR j.task_id IN (SELECT id FROM workflow_tasks WHERE instance_id = :i AND activation_id = :a))",
)


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
            _RECOVERY_WAITS_DEADLINE_CAP,
            {"a": act, "d": old_wait["deadline_at"]},
        )
    cap = run(
        conn,
        _RECOVERY_WAITS_NEXT_DEADLINE,
        {"a": act, "d": inst["deadline_at"]},
    ).scalar_one()
    run(
        conn,
        _RECOVERY_TASKS_DEADLINE_CAP,
        {"i": inst["id"], "a": act, "d": inst["deadline_at"]},
    )
    run(
        conn,
        _RECOVERY_WAKES_RUN_AT_CAP,
        {"i": inst["id"], "a": act, "cap": min(cap, inst["deadline_at"])},
    )


_RECOVERY_REVIEW_STEPS_COUNT = query(
    "recovery_review_steps_count",
    "SELECT count(*) FROM workflow_steps WHERE instance_id = :id AND state = 'NEEDS_REVIEW'",
)


def _leave_review(conn: Connection, iid: str, *, failed_step: dict | None, reason: str) -> None:
    inst = read_instance(conn, iid)
    left = run(
        conn,
        _RECOVERY_REVIEW_STEPS_COUNT,
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
        stopping.finish_cancel(conn, iid)
    else:
        driver.fanout_top_up(conn, inst, "review")  # fan-out children held back by the review
        driver.make_progress(conn, iid)


_RECOVERY_REVIEW_STEPS_KEYS = query(
    "recovery_review_steps_keys",
    "SELECT key FROM workflow_steps WHERE instance_id = :id AND state = 'NEEDS_REVIEW' ORDER BY key",
)


def resolve_instance(conn: Connection, instance_id: str, req: dict) -> tuple[dict, dict, dict]:
    """Returns (instance before, instance after, summary of the review and its resolution)."""
    inst = lock_instance(conn, instance_id)
    if inst["state"] in TERMINAL:
        raise StateConflict(f"the workflow is {inst['state']}")
    if inst["state"] != "NEEDS_REVIEW":
        raise StateConflict(
            f"the workflow is {inst['state']}: RESOLVE_INSTANCE resolves a NEEDS_REVIEW workflow"
        )
    in_review = [
        r[0]
        for r in run(
            conn,
            _RECOVERY_REVIEW_STEPS_KEYS,
            {"id": instance_id},
        )
    ]
    if in_review:
        raise StateConflict(
            f"steps {', '.join(in_review)} are in review: resolve them with RETRY_STEP, SUCCEED_STEP or FAIL_STEP"
        )
    resolution = req["resolution"]
    comp = inst["compensation"] or {}
    summary: dict = {"resolution": resolution}
    if comp.get("state") == "FAILED":
        item = comp["plan"][comp["index"]]
        summary.update(
            review="COMPENSATION_FAILED",
            compensation={
                "step_key": item["step_key"],
                "task_id": comp.get("task_id"),
                "order": comp["index"] + 1,
            },
        )
        if resolution == "CONTINUE":
            stopping.compensation_continue(conn, inst)
        else:
            summary["abandoned"] = [p["step_key"] for p in comp["plan"][comp["index"] + 1 :]]
            stopping.abandon(
                conn, inst, InstanceState.CANCELLED if resolution == "CANCEL" else InstanceState.FAILED
            )
        return inst, read_instance(conn, instance_id), summary
    summary.update(
        review="UNKNOWN_OUTCOME",
        unknown_outcome_jobs=[str(j["id"]) for j in stopping.unknown_outcome_jobs(conn, instance_id)],
    )
    cancelling = inst["cancel_requested_at"] is not None
    if resolution == "FAIL":
        stopping.stop(
            conn, inst, InstanceState.FAILED, error={"code": "FAILED_BY_OPERATOR", "message": req["reason"]}
        )
        return inst, read_instance(conn, instance_id), summary
    instance_moves.leave_review(
        conn, instance_id, InstanceState.CANCELLING if cancelling else InstanceState.RUNNING
    )
    if cancelling:
        stopping.finish_cancel(conn, instance_id)
    elif resolution == "CANCEL":
        stopping.request_cancel(conn, read_instance(conn, instance_id), reason=req["reason"], reviewed=True)
    else:
        driver.fanout_top_up(conn, inst, "review")  # fan-out children held back by the review
        driver.make_progress(conn, instance_id)
    return inst, read_instance(conn, instance_id), summary
