"""Instance-level recovery (X-RECOVER): an operator resolves a NEEDS_REVIEW **instance** whose review is
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

from sqlalchemy import Connection

from app.engine import advance, stopping
from app.engine.states import TERMINAL, InstanceState
from app.engine.store import lock_instance, read_instance
from app.engine.transitions import instance_moves
from app.errors import StateConflict
from app.sql import run


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
            "SELECT key FROM workflow_steps WHERE instance_id = :id AND state = 'NEEDS_REVIEW' ORDER BY key",
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
        stopping.settle_cancel(conn, instance_id)
    elif resolution == "CANCEL":
        stopping.request_cancel(conn, read_instance(conn, instance_id), reason=req["reason"], reviewed=True)
    else:
        advance.settle_progress(conn, instance_id)
    return inst, read_instance(conn, instance_id), summary
