"""Pause, resume, cancel (W-CTL, L-PAUSE) inside the caller's transaction, instance row locked first.

- Every decision names the ``control_revision`` it was made on; a stale one is a 409 STATE_CONFLICT.
  A decision bumps ``control_revision`` and ``revision``; background progress bumps ``revision`` only.
- PAUSE: ``paused`` gates task claims (``tasks.claim``) and new activations (``steps.after_change``);
  the instance's suspend-scope jobs keep their remaining milliseconds (``suspend_jobs``); results of
  in-flight tasks are still collected. A running unsafe call with an open marker goes to the
  "needs confirmation" dead letter and the instance to NEEDS_REVIEW.
- RESUME: jobs come back with exactly their remainder and the domain deadlines they enforce (task,
  timer / signal wait, poll round, signal expiry) follow them; the workflow deadline never moves;
  NEEDS_REVIEW stays.
- CANCEL: CANCELLING with cancel_requested_at / stop_kind CANCEL / stop_requested_at (a first stop
  target is kept); waiting work stops; clear-scope jobs are canceled; claimed tasks keep their permit
  until they end (``collect_during_cancel``); then completed steps that declare a compensation are
  compensated one after another in reverse completion order (``saga``) and the instance is CANCELLED. A job whose
  external outcome is unknown sends the instance (and its step) to NEEDS_REVIEW instead.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from app.engine import oplog, saga, steps
from app.engine.store import (
    MISSING,
    TERMINAL,
    jdump,
    lock_instance,
    read_instance,
)
from app.errors import FieldError, InvalidArgument, StateConflict
from app.ledger.enqueue import enqueue
from app.ledger.states import EXTERNAL_OUTCOME_UNKNOWN
from app.ledger.suspend import clear_jobs, resume_jobs, suspend_jobs

OPERATIONS = ("PAUSE", "RESUME", "CANCEL")
CONTROL_FIELDS = {"operation", "expected_control_revision", "reason"}


def validate_control(body: Any) -> dict:
    from app.engine import fields

    if not isinstance(body, dict):
        raise InvalidArgument("the request body must be a JSON object", field="$")
    errors: list[FieldError] = fields.unknown(body, CONTROL_FIELDS)
    op = body.get("operation")
    if "operation" not in body:
        errors.append(FieldError("operation", "required: PAUSE, RESUME or CANCEL"))
    elif op not in OPERATIONS:
        errors.append(FieldError("operation", "one of PAUSE, RESUME, CANCEL"))
    rev = fields.revision(errors, body, "expected_control_revision")
    reason = fields.reason(errors, body)
    if errors:
        raise InvalidArgument(errors=errors)
    return {"operation": op, "expected_control_revision": rev, "reason": reason}


def control(conn: Connection, instance_id: str, req: dict) -> tuple[dict, dict]:
    """Apply one decision; returns (instance before, instance after). The caller audits it."""
    inst = lock_instance(conn, instance_id)
    if inst["control_revision"] != req["expected_control_revision"]:
        raise StateConflict(
            f"expected_control_revision {req['expected_control_revision']} is stale: the control revision "
            f"is {inst['control_revision']}; read the workflow and decide again"
        )
    if inst["state"] in TERMINAL:
        raise StateConflict(f"the workflow is {inst['state']}")
    op = req["operation"]
    if op == "PAUSE":
        pause(conn, inst)
    elif op == "RESUME":
        resume(conn, inst)
    else:
        cancel(conn, inst)
    return inst, read_instance(conn, instance_id)


def _bump_control(conn: Connection, iid: str, sets: str) -> None:
    conn.execute(
        text(
            "UPDATE workflow_instances SET control_revision = control_revision + 1, revision = revision + 1, "
            f"updated_at = now(), {sets} WHERE id = :id"
        ),
        {"id": iid},
    )


# --------------------------------------------------------------------------- pause / resume
def pause(conn: Connection, inst: dict) -> None:
    if inst["paused"]:
        raise StateConflict("the workflow is already paused")
    if inst["stop_requested_at"] is not None:
        raise StateConflict(
            "a cancel was requested or the workflow is failing: it is settling (compensations) and cannot "
            "be paused"
        )
    _bump_control(conn, inst["id"], "paused = true")
    moved = suspend_jobs(conn, inst["id"])
    dead = [m["id"] for m in moved if m["status"] == "dead"]
    if dead:
        to_review(conn, inst["id"], dead)


def resume(conn: Connection, inst: dict) -> None:
    if not inst["paused"]:
        raise StateConflict("the workflow is not paused")
    _bump_control(conn, inst["id"], "paused = false")
    rows = resume_jobs(conn, inst["id"])
    sync_resumed(conn, inst, [r["id"] for r in rows])
    if inst["stop_requested_at"] is None:
        steps.after_change(conn, inst["id"])  # activations held back by the pause start now


_SYNC = [
    # a task's own deadline follows its task_timeout job
    """UPDATE workflow_tasks t SET deadline_at = j.run_at, updated_at = now() FROM workflow_jobs j
       WHERE j.id = ANY(:ids) AND j.type = 'task_timeout' AND t.id = j.task_id
         AND t.state IN ('PENDING', 'CLAIMED')""",
    # timer / signal-timeout waits follow their delay_wake job
    """UPDATE workflow_waits w SET deadline_at = j.run_at FROM workflow_jobs j
       WHERE j.id = ANY(:ids) AND j.type = 'delay_wake' AND j.payload->>'wake' IN ('timer', 'signal_timeout')
         AND w.activation_id = j.payload->>'activation_id' AND w.state = 'WAITING'""",
    """UPDATE workflow_activations a SET poll_next_at = j.run_at FROM workflow_jobs j
       WHERE j.id = ANY(:ids) AND j.type = 'delay_wake' AND j.payload->>'wake' = 'poll'
         AND a.id = j.payload->>'activation_id' AND a.poll_next_at IS NOT NULL""",
    """UPDATE workflow_signals s SET expires_at = j.run_at, updated_at = now() FROM workflow_jobs j
       WHERE j.id = ANY(:ids) AND j.type = 'delay_wake' AND j.payload->>'wake' = 'signal_expiry'
         AND s.id = j.payload->>'signal_id' AND s.state = 'PENDING'""",
    # W-CTL-2: the workflow deadline is never extended by a pause
    """UPDATE workflow_jobs j SET run_at = LEAST(j.run_at, i.deadline_at) FROM workflow_instances i
       WHERE j.id = ANY(:ids) AND j.type = 'delay_wake' AND j.payload->>'wake' = 'deadline'
         AND i.id = j.instance_id AND j.status = 'pending'""",
]


def sync_resumed(conn: Connection, inst: dict, job_ids: list[int]) -> None:
    if job_ids:
        for sql in _SYNC:
            conn.execute(text(sql), {"ids": job_ids})


# --------------------------------------------------------------------------- review
def unknown_outcome_jobs(conn: Connection, iid: str) -> list[dict]:
    rows = conn.execute(
        text(
            "SELECT id, step_key FROM workflow_jobs WHERE instance_id = :id AND "
            "((status = 'running' AND effect_marker IS NOT NULL) OR (status = 'dead' AND error_code = :u)) "
            "ORDER BY id"
        ),
        {"id": iid, "u": EXTERNAL_OUTCOME_UNKNOWN},
    )
    return [dict(r._mapping) for r in rows]


def to_review(conn: Connection, iid: str, job_ids: list[int]) -> None:
    """An unknown external outcome: its step (if any) and the instance go to NEEDS_REVIEW."""
    keys = [
        r[0]
        for r in conn.execute(
            text("SELECT DISTINCT step_key FROM workflow_jobs WHERE id = ANY(:ids) AND step_key IS NOT NULL"),
            {"ids": job_ids},
        )
    ]
    if keys:
        conn.execute(
            text(
                "UPDATE workflow_activations a SET state = 'NEEDS_REVIEW' FROM workflow_steps s "
                "WHERE s.activation_id = a.id AND s.instance_id = :id AND s.key = ANY(:keys) "
                "AND s.state IN ('ACTIVE', 'WAITING')"
            ),
            {"id": iid, "keys": keys},
        )
        conn.execute(
            text(
                "UPDATE workflow_steps SET state = 'NEEDS_REVIEW', revision = revision + 1, updated_at = now() "
                "WHERE instance_id = :id AND key = ANY(:keys) AND state IN ('ACTIVE', 'WAITING')"
            ),
            {"id": iid, "keys": keys},
        )
    conn.execute(
        text(
            "UPDATE workflow_instances SET state = 'NEEDS_REVIEW', revision = revision + 1, updated_at = now() "
            "WHERE id = :id"
        ),
        {"id": iid},
    )
    inst = read_instance(conn, iid)
    oplog.advance(conn, inst, "workflow.needs_review", after={"unknown_outcome_jobs": job_ids, "steps": keys})


# --------------------------------------------------------------------------- cancel
def cancel(
    conn: Connection, inst: dict, *, reason: str = "workflow canceled", reviewed: bool = False
) -> None:
    """``reviewed``: an operator just resolved the instance's unknown outcomes (``review``); they are
    not sent to review again."""
    if inst["cancel_requested_at"] is not None:
        raise StateConflict("a cancel was already requested")
    if inst["stop_requested_at"] is not None:
        raise StateConflict("the workflow is failing: its compensations are running")
    iid = inst["id"]
    _bump_control(
        conn,
        iid,
        "state = 'CANCELLING', cancel_requested_at = now(), stop_kind = COALESCE(stop_kind, 'CANCEL'), "
        "stop_requested_at = COALESCE(stop_requested_at, now())",
    )
    unknown = [] if reviewed else unknown_outcome_jobs(conn, iid)
    clear_jobs(conn, iid, reason, keep_unknown=True)
    # waiting work stops: unclaimed (or lease-expired) tasks, open waits, children
    conn.execute(
        text(
            "UPDATE workflow_tasks SET state = 'CANCELLED', updated_at = now(), completed_at = now(), "
            "lease_expires_at = NULL WHERE instance_id = :id AND purpose = 'STEP' "
            "AND (state = 'PENDING' OR (state = 'CLAIMED' AND lease_expires_at <= now()))"
        ),
        {"id": iid},
    )
    conn.execute(
        text("UPDATE workflow_waits SET state = 'CANCELLED' WHERE instance_id = :id AND state = 'WAITING'"),
        {"id": iid},
    )
    for (child_id,) in conn.execute(
        text(
            "SELECT a.child_instance_id FROM workflow_steps s JOIN workflow_activations a ON a.id = s.activation_id "
            "JOIN workflow_instances c ON c.id = a.child_instance_id "
            "WHERE s.instance_id = :id AND s.state = 'ACTIVE' AND c.state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') "
            "AND c.cancel_requested_at IS NULL ORDER BY 1"
        ),
        {"id": iid},
    ).all():
        child = lock_instance(conn, child_id)
        cancel(conn, child, reason="parent workflow canceled")
        oplog.advance(
            conn, child, "workflow.control.cancel", after={"cause": "parent canceled", "parent": iid}
        )
    _stop_idle_steps(conn, iid)
    if unknown:
        to_review(conn, iid, [j["id"] for j in unknown])
        return
    try_finish_cancel(conn, iid)


def _in_flight(conn: Connection, iid: str) -> Any:
    return conn.execute(
        text(
            "SELECT count(*) AS n, max(lease_expires_at) AS until FROM workflow_tasks WHERE instance_id = :id "
            "AND purpose = 'STEP' AND state = 'CLAIMED' AND lease_expires_at > now()"
        ),
        {"id": iid},
    ).first()


def _stop_idle_steps(conn: Connection, iid: str) -> None:
    """Steps with no in-flight task are CANCELLED now; the others wait for their task's end."""
    idle = """s.instance_id = :id AND s.state IN ('ACTIVE', 'WAITING') AND NOT EXISTS (
        SELECT 1 FROM workflow_tasks t WHERE t.activation_id = s.activation_id AND t.purpose = 'STEP'
          AND t.state = 'CLAIMED' AND t.lease_expires_at > now())"""
    conn.execute(
        text(
            "UPDATE workflow_activations a SET state = 'CANCELLED', completed_at = now() FROM workflow_steps s "
            f"WHERE s.activation_id = a.id AND {idle}"
        ),
        {"id": iid},
    )
    conn.execute(
        text(
            f"UPDATE workflow_steps s SET state = 'CANCELLED', revision = s.revision + 1, updated_at = now() WHERE {idle}"
        ),
        {"id": iid},
    )


def try_finish_cancel(conn: Connection, iid: str) -> dict:
    """CANCELLING with nothing in flight: compensations one after another in reverse completion
    order (``saga``), then CANCELLED. A compensation chain already under way is left to itself."""
    inst = read_instance(conn, iid)
    if inst["state"] != "CANCELLING" or saga.running(inst):
        return inst
    conn.execute(
        text(
            "UPDATE workflow_tasks SET state = 'CANCELLED', updated_at = now(), completed_at = now(), "
            "lease_expires_at = NULL WHERE instance_id = :id AND purpose = 'STEP' AND state = 'CLAIMED' "
            "AND lease_expires_at <= now()"
        ),
        {"id": iid},
    )
    _stop_idle_steps(conn, iid)
    flight = _in_flight(conn, iid)
    if flight.n:
        # re-check when the last permit's lease runs out (a heartbeat moves it: then again)
        enqueue(
            conn,
            "delay_wake",
            {"wake": "cancel_settle"},
            instance_id=iid,
            run_at=flight.until,
            idempotency_key=f"delay_wake:cancel_settle:{iid}:{flight.until.isoformat()}",
            trace_id=inst["trace_id"],
        )
        return inst
    return saga.stop(conn, inst, "CANCELLED")


def collect_during_cancel(conn: Connection, inst: dict, task: dict, kind: str, value: Any) -> None:
    """An in-flight task ended while the instance is cancelling: its outcome is recorded on its step
    (a completed step may be compensated); nothing new starts; the cancel may now finish."""
    row = conn.execute(
        text("SELECT id, kind, state, activation_id FROM workflow_steps WHERE instance_id = :i AND key = :k"),
        {"i": inst["id"], "k": task["step_key"]},
    ).first()
    if row is not None and row.activation_id == task["activation_id"] and row.state in ("ACTIVE", "WAITING"):
        succeeded = kind == "completed" and (
            row.kind != "POLL" or (isinstance(value, dict) and value.get("done") is True)
        )
        state = "SUCCEEDED" if succeeded else ("FAILED" if kind == "failed" else "CANCELLED")
        conn.execute(
            text(
                "UPDATE workflow_activations SET state = :s, completed_at = now(), "
                "output = CASE WHEN :s = 'SUCCEEDED' THEN CAST(:o AS jsonb) ELSE output END, "
                "error = CASE WHEN :s = 'FAILED' THEN CAST(:e AS jsonb) ELSE error END WHERE id = :id"
            ),
            {
                "id": row.activation_id,
                "s": state,
                "o": jdump(value if value is not MISSING else None) if succeeded else None,
                "e": jdump(value) if kind == "failed" else None,
            },
        )
        conn.execute(
            text(
                "UPDATE workflow_steps SET state = :s, revision = revision + 1, updated_at = now() WHERE id = :id"
            ),
            {"id": row.id, "s": state},
        )
        conn.execute(
            text("UPDATE workflow_instances SET revision = revision + 1, updated_at = now() WHERE id = :id"),
            {"id": inst["id"]},
        )
        oplog.advance(
            conn,
            inst,
            f"workflow.step.{state.lower()}",
            target_type="step",
            target_id=task["step_key"],
            after={"step_key": task["step_key"], "task_id": task["id"], "during": "cancel"},
        )
    if inst["state"] == "CANCELLING":
        try_finish_cancel(conn, inst["id"])
