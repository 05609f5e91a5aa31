"""How an instance stops (W-CTL, X-AUTO, L-PAUSE-4), inside the caller's transaction with the instance
row locked (lock order: instance, then its children, tasks, ledger jobs). The decisions are in
``decide.stopping``; this module applies them.

- ``request_cancel``: CANCELLING; waiting work stops; clear-scope jobs are canceled; children get a
  cancel request; claimed tasks keep their permit until they end (``collect``); then ``finish_cancel``.
- ``finish_cancel``: CANCELLING with nothing in flight -> ``stop(CANCELLED)``; else a ``cancel_settle``
  wake at the last lease's end.
- ``stop``: the end without success. Nothing to compensate -> ``finish`` now. Otherwise the work is
  closed, the instance stays CANCELLING with its compensation plan and ``compensation_action`` job 0 is
  enqueued; ``compensation_task_ended`` moves the chain one task at a time (reverse completion order);
  a failed compensation sends the instance to NEEDS_REVIEW.
- ``finish``: ``close_work`` (tasks, waits, steps, clear-scope jobs, children, pending signals) and
  ``end`` (terminal state, audit, the parent's ``subprocess_join``).
- ``to_review``: an unknown external outcome sends its step and the instance to NEEDS_REVIEW."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine import audit_entries, jobs_and_tasks, signal_match
from app.engine.decide import stopping as decide
from app.engine.decide.model import (
    Collect,
    Compensate,
    CompensationFailed,
    End,
    Ignore,
    Refuse,
    Stop,
    WaitInFlight,
)
from app.engine.row_access import (
    MISSING,
    lock_instance,
    open_work,
    read_instance,
    read_step,
    step_specs,
    version_document,
)
from app.engine.snapshot import inst_model
from app.engine.states import TERMINAL, InstanceState, StepState, StopKind
from app.engine.transitions import instance_moves, step_moves, task_moves, wait_moves
from app.errors import StateConflict
from app.ledger import transitions as ledger_moves
from app.ledger.states import CLEAR_SCOPE, EXTERNAL_OUTCOME_UNKNOWN, JobType
from app.ledger.suspend import clear_jobs
from app.sql import query, run


# --------------------------------------------------------------------------- the end
def _waiting_jobs(state: str) -> tuple[list[str], str]:
    """The instance's jobs that its end as ``state`` cancels while they wait to run: their types (the clear
    scope) and the reason."""
    return sorted(t.value for t in CLEAR_SCOPE), f"workflow {state.lower()}"


def close_work(conn: Connection, inst: dict, state: str, error: Any = MISSING, *, jobs: bool = True) -> None:
    """Open tasks / waits are canceled, ACTIVE / WAITING steps become CANCELLED (unless the
    instance succeeded), pending clear-scope jobs are canceled (``jobs`` False: the end's statement that
    follows cancels them, ``finish``), unfinished children get a cancel request (``state`` FAILED /
    CANCELLED) and pending signals are closed."""
    iid = inst["id"]
    left = open_work(conn, iid)  # one read; the moves below only for what is open
    if left.tasks:
        task_moves.cancel_open(conn, instance_id=iid)
    if left.waits:
        wait_moves.cancel_open(conn, instance_id=iid)
    if state != InstanceState.SUCCEEDED:
        step_moves.cancel_open(conn, iid)
    if jobs:
        ledger_moves.cancel_waiting(conn, iid, *_waiting_jobs(state))
        jobs_and_tasks.watch_cleared(conn, iid)
    if state != InstanceState.SUCCEEDED:
        stop_children(conn, inst, state, error)
    if left.signals:
        signal_match.close_pending(conn, iid)


def end(
    conn: Connection,
    inst: dict,
    state: str,
    *,
    output: Any = MISSING,
    error: Any = MISSING,
    work_closed: bool = False,
    cancel_jobs: bool = False,
) -> dict:
    """The terminal state with completed_at (an error recorded when the stop began is kept), the
    audit row, and the parent's ``subprocess_join`` (same transaction). ``work_closed``: the caller
    closed the instance's work (``close_work``) in this transaction, with nothing opened since;
    ``cancel_jobs``: the end's statement also cancels the instance's waiting jobs (``close_work`` left
    them to it)."""
    iid = inst["id"]
    waiting = _waiting_jobs(state) if cancel_jobs else None
    current = instance_moves.end(conn, iid, state, output=output, error=error, cancel_waiting=waiting)
    if cancel_jobs:
        jobs_and_tasks.watch_cleared(conn, iid)
    if not work_closed:
        task_moves.cancel_open(conn, instance_id=iid)  # compensation tasks of an abandoned chain
    audit_entries.advance(
        conn, inst, f"workflow.{state.lower()}", before={"state": inst["state"]}, after={"state": state}
    )
    if current["parent_instance_id"]:
        jobs_and_tasks.job(
            conn,
            {"id": current["parent_instance_id"], "trace_id": current["trace_id"]},
            JobType.SUBPROCESS_JOIN,
            {"child_id": iid},
            key=iid,
            step_key=current["parent_step_key"],
        )
    return current


def finish(conn: Connection, inst: dict, state: str, *, output: Any = MISSING, error: Any = MISSING) -> dict:
    """End the instance now: close its work, then the terminal state, whose statement also cancels the
    instance's jobs that wait to run (one statement less than a cancel of its own)."""
    close_work(conn, inst, state, error, jobs=False)
    return end(conn, inst, state, output=output, error=error, work_closed=True, cancel_jobs=True)


def stop_children(conn: Connection, inst: dict, state: str, error: Any = MISSING) -> None:
    """A parent that ends without success stops its unfinished SUBWORKFLOW children: each gets a
    cancel request with the parent's reason (W-CTL CANCEL semantics), like Temporal's REQUEST_CANCEL
    parent close policy. Lock order: parent (already locked), then each child."""
    code = error.get("code") if isinstance(error, dict) else None
    reason = f"parent workflow {inst['id']} {state.lower()}" + (f" ({code})" if code else "")
    for child_id in instance_moves.unfinished_children(conn, inst["id"]):
        _cancel_child(
            conn,
            child_id,
            reason,
            {"cause": f"parent {state.lower()}", "parent": inst["id"], "reason": reason},
        )


def _cancel_child(conn: Connection, child_id: str, reason: str, after: dict) -> None:
    """A cancel request to child ``child_id`` (locked here) unless it ended or is stopping already, with
    its audit entry ``after``."""
    child = lock_instance(conn, child_id)
    if child["state"] in TERMINAL or child["stop_requested_at"] is not None:
        return
    request_cancel(conn, child, reason=reason)
    audit_entries.advance(conn, child, "workflow.control.cancel", after=after)


# --------------------------------------------------------------------------- review
_Q_STOPPING_UNKNOWN_OUTCOME_JOBS = query(
    "stopping_unknown_outcome_jobs",
    "SELECT id, step_key FROM workflow_jobs WHERE instance_id = :id AND "
    "((status = 'running' AND effect_marker IS NOT NULL) OR (status = 'dead' AND error_code = :u)) "
    "ORDER BY id",
)


def unknown_outcome_jobs(conn: Connection, iid: str) -> list[dict]:
    rows = run(
        conn,
        _Q_STOPPING_UNKNOWN_OUTCOME_JOBS,
        {"id": iid, "u": EXTERNAL_OUTCOME_UNKNOWN},
    )
    return [dict(r._mapping) for r in rows]


_Q_STOPPING_TO_REVIEW = query(
    "stopping_to_review",
    "SELECT DISTINCT step_key FROM workflow_jobs WHERE id = ANY(:ids) AND step_key IS NOT NULL",
)


def to_review(conn: Connection, iid: str, job_ids: list[int]) -> None:
    """An unknown external outcome: its step (if any) and the instance go to NEEDS_REVIEW."""
    keys = [
        r[0]
        for r in run(
            conn,
            _Q_STOPPING_TO_REVIEW,
            {"ids": job_ids},
        )
    ]
    if keys:
        step_moves.to_review(conn, iid, keys)
    instance_moves.to_review(conn, iid)
    audit_entries.advance(
        conn,
        read_instance(conn, iid),
        "workflow.needs_review",
        after={"unknown_outcome_jobs": job_ids, "steps": keys},
    )


# --------------------------------------------------------------------------- cancel
_Q_STOPPING_REQUEST_CANCEL = query(
    "stopping_request_cancel",
    "SELECT s.child_instance_id FROM workflow_steps s "
    "JOIN workflow_instances c ON c.id = s.child_instance_id "
    "WHERE s.instance_id = :id AND s.state = 'ACTIVE' AND c.state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') "
    "AND c.cancel_requested_at IS NULL "
    # a fan-out's children (one per element, found by the step's activation)
    "UNION SELECT c.id FROM workflow_steps s JOIN workflow_instances c ON c.parent_activation_id = s.activation_id "
    "WHERE s.instance_id = :id AND s.state = 'ACTIVE' AND s.kind = 'SUBWORKFLOW' "
    "AND c.state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND c.cancel_requested_at IS NULL ORDER BY 1",
)
_FANOUT_CHILDREN_TO_STOP = query(
    "stopping_fanout_children",
    "SELECT id, parent_instance_id FROM workflow_instances WHERE parent_activation_id = :a "
    "AND stop_requested_at IS NULL "
    "AND state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') ORDER BY id",
)


def stop_fanout_children(conn: Connection, activation_id: str, reason: str) -> None:
    """The unfinished children of a fan-out activation get a cancel request (its step was closed or
    retried by an operator: nothing waits for them any more). Lock order: parent (locked), each child."""
    for child_id, parent_id in run(conn, _FANOUT_CHILDREN_TO_STOP, {"a": activation_id}).all():
        _cancel_child(conn, child_id, reason, {"cause": reason, "parent": parent_id})


def request_cancel(
    conn: Connection, inst: dict, *, reason: str = "workflow canceled", reviewed: bool = False
) -> None:
    """W-CTL CANCEL. ``reviewed``: an operator just resolved the instance's unknown outcomes; they
    are not sent to review again."""
    verdict = decide.cancel_allowed(inst_model(inst))
    if isinstance(verdict, Refuse):
        raise StateConflict(verdict.message)
    iid = inst["id"]
    instance_moves.request_cancel(conn, iid)
    unknown = [] if reviewed else unknown_outcome_jobs(conn, iid)
    clear_jobs(conn, iid, reason, keep_unknown=True)
    jobs_and_tasks.watch_cleared(conn, iid)
    # waiting work stops: unclaimed (or lease-expired) tasks, open waits, children
    task_moves.cancel_open(conn, instance_id=iid, step_only=True, unclaimed_or_expired=True)
    wait_moves.cancel_open(conn, instance_id=iid)
    for (child_id,) in run(
        conn,
        _Q_STOPPING_REQUEST_CANCEL,
        {"id": iid},
    ).all():
        child = lock_instance(conn, child_id)
        request_cancel(conn, child, reason="parent workflow canceled")
        audit_entries.advance(
            conn, child, "workflow.control.cancel", after={"cause": "parent canceled", "parent": iid}
        )
    step_moves.cancel_open(conn, iid, idle_only=True)
    if unknown:
        to_review(conn, iid, [j["id"] for j in unknown])
        return
    finish_cancel(conn, iid)


_Q_STOPPING_FINISH_CANCEL = query(
    "stopping_finish_cancel",
    "SELECT count(*) AS n, max(lease_expires_at) AS until FROM workflow_tasks WHERE instance_id = :id "
    "AND purpose = 'STEP' AND state = 'CLAIMED' AND lease_expires_at > now()",
)


def finish_cancel(conn: Connection, iid: str) -> dict:
    """CANCELLING with nothing in flight: compensations one after another in reverse completion
    order, then CANCELLED. A compensation chain already under way is left to itself."""
    inst = read_instance(conn, iid)
    if isinstance(decide.finish_cancel(inst_model(inst), in_flight=0), Ignore):
        return inst
    task_moves.cancel_open(conn, instance_id=iid, step_only=True, expired_claims_only=True)
    step_moves.cancel_open(conn, iid, idle_only=True)
    flight = run(
        conn,
        _Q_STOPPING_FINISH_CANCEL,
        {"id": iid},
    ).first()
    verdict = decide.finish_cancel(inst_model(inst), in_flight=flight.n)
    if isinstance(verdict, WaitInFlight):
        # re-check when the last permit's lease runs out (a heartbeat moves it: then again)
        jobs_and_tasks.wake(
            conn,
            inst,
            "cancel_settle",
            key=f"cancel_settle:{iid}:{flight.until.isoformat()}",
            run_at=flight.until,
        )
        return inst
    return stop(conn, inst, InstanceState.CANCELLED)


def collect(conn: Connection, inst: dict, task: dict, verdict: Collect) -> None:
    """An in-flight task ended while the instance is cancelling: its outcome is recorded on its step
    (a completed step may be compensated); nothing new starts; the cancel may now finish."""
    if verdict.state is not None:
        step = read_step(conn, inst["id"], task["step_key"])
        assert step is not None  # the task's step
        output = verdict.output if verdict.output is not MISSING else None
        if verdict.state == StepState.SUCCEEDED:
            step_moves.succeed(conn, step, output)
        elif verdict.state == StepState.FAILED:
            step_moves.fail(conn, step, verdict.output)
        else:
            step_moves.cancel(conn, step)
        instance_moves.touch(conn, inst["id"])
        audit_entries.advance(
            conn,
            inst,
            f"workflow.step.{verdict.state.lower()}",
            target_type="step",
            target_id=task["step_key"],
            after={"step_key": task["step_key"], "task_id": task["id"], "during": "cancel"},
        )
    if inst["state"] == InstanceState.CANCELLING:
        finish_cancel(conn, inst["id"])


# --------------------------------------------------------------------------- saga (X-AUTO)
_SUCCEEDED_TASK_STEPS = query(
    "steps_succeeded_tasks",
    "SELECT s.key, s.activation_id, row_number() OVER (ORDER BY s.completed_at, s.activation_id) AS ord "
    "FROM workflow_steps s WHERE s.instance_id = :id AND s.state = 'SUCCEEDED' AND s.kind = 'TASK' "
    # a rerun's copied step is never compensated here: its effect belongs to the old run
    "AND s.copied_from IS NULL",
)


def compensation_plan(conn: Connection, inst: dict) -> list[dict]:
    specs = step_specs(version_document(conn, inst["definition_version_id"]))
    done = run(conn, _SUCCEEDED_TASK_STEPS, {"id": inst["id"]}).all()
    return decide.compensation_plan(
        [{"step_key": r.key, "activation_id": r.activation_id, "order": r.ord} for r in done], specs
    )


def stop(conn: Connection, inst: dict, state: str, *, error: Any = MISSING) -> dict:
    """The instance ends as ``state`` (FAILED / CANCELLED) — after its compensations, if any."""
    verdict = decide.stop(compensation_plan(conn, inst), state)
    if isinstance(verdict, End):
        return finish(conn, inst, state, error=error)
    iid = inst["id"]
    close_work(conn, inst, state, error)
    comp = verdict.comp
    kind = StopKind.CANCEL if state == InstanceState.CANCELLED else StopKind.FAILURE
    instance_moves.start_compensation(conn, iid, comp, stop_kind=kind, error=error)
    current = read_instance(conn, iid)
    _issue(conn, current, comp)
    audit_entries.advance(
        conn,
        current,
        "workflow.compensation.started",
        before={"state": inst["state"]},
        after={"final": state, "compensations": [p["step_key"] for p in comp["plan"]]},
    )
    return current


def _issue(conn: Connection, inst: dict, comp: dict) -> None:
    k = comp["index"]
    step_key = comp["plan"][k]["step_key"]
    jobs_and_tasks.job(
        conn,
        inst,
        JobType.COMPENSATION_ACTION,
        {"index": k, "step_key": step_key},
        key=f"{inst['id']}:{k}",
        step_key=step_key,
    )


def compensation_task_ended(conn: Connection, inst: dict, task: dict, kind: str, value: Any) -> None:
    """A compensation task ended (completed / failed / timed out)."""
    verdict = decide.compensation_task_ended(inst_model(inst), task["id"], kind == "completed")
    if isinstance(verdict, Ignore):
        return
    comp = inst["compensation"]
    k = comp["index"]
    item = comp["plan"][k]
    after = {"step_key": item["step_key"], "task_id": task["id"], "order": k + 1}
    if isinstance(verdict, CompensationFailed):
        instance_moves.save_compensation(conn, inst["id"], verdict.comp, InstanceState.NEEDS_REVIEW)
        audit_entries.advance(
            conn,
            inst,
            "workflow.compensation.failed",
            target_type="step",
            target_id=item["step_key"],
            after={
                **after,
                "error": value if value is not MISSING else None,
                "remaining": [p["step_key"] for p in comp["plan"][k + 1 :]],
            },
        )
        return
    audit_entries.advance(
        conn,
        inst,
        "workflow.compensation.completed",
        target_type="step",
        target_id=item["step_key"],
        after=after,
    )
    apply_compensation(conn, inst, verdict)


def compensation_continue(conn: Connection, inst: dict) -> dict:
    """An operator handled the failed compensation by hand: the chain goes on (or ends)."""
    return apply_compensation(conn, inst, decide.compensation_next(inst_model(inst), inst["compensation"]))


def apply_compensation(conn: Connection, inst: dict, verdict: End | Compensate) -> dict:
    if isinstance(verdict, Compensate):
        instance_moves.save_compensation(conn, inst["id"], verdict.comp, InstanceState.CANCELLING)
        _issue(conn, inst, verdict.comp)
        return read_instance(conn, inst["id"])
    instance_moves.save_compensation(conn, inst["id"], verdict.comp or {})
    return end(conn, read_instance(conn, inst["id"]), verdict.state)


def abandon(conn: Connection, inst: dict, state: str) -> dict:
    """An operator ends a stopping instance now: the remaining compensations are not run."""
    comp = inst.get("compensation") or {}
    if comp:
        instance_moves.save_compensation(conn, inst["id"], {**comp, "state": "ABANDONED"})
    return end(conn, read_instance(conn, inst["id"]), state)


def apply_stop(conn: Connection, inst: dict, verdict: Stop) -> dict:
    return stop(conn, inst, verdict.state, error=verdict.error if verdict.error is not None else MISSING)
