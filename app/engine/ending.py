"""The end of an instance, inside the caller's transaction with the instance row locked.

``close_work`` stops everything that could still run (open tasks, waits, unfinished steps,
clear-scope jobs, children, pending signals); ``end_instance`` writes the terminal state, audits it
and tells a parent workflow. ``finish_instance`` is both at once; a stop with compensations to run
(``saga.stop``) closes the work first and ends the instance when its compensations are done."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from app.engine.store import MISSING, TERMINAL, jdump, read_instance
from app.ledger import transitions
from app.ledger.enqueue import enqueue
from app.ledger.states import CLEAR_SCOPE


def close_work(conn: Connection, inst: dict, state: str, error: Any = MISSING) -> None:
    """Open tasks / waits are canceled, ACTIVE / WAITING steps become CANCELLED (unless the
    instance succeeded), pending clear-scope jobs are canceled, unfinished children get a cancel
    request (``state`` FAILED / CANCELLED) and pending signals are closed."""
    iid = inst["id"]
    conn.execute(
        text(
            "UPDATE workflow_tasks SET state = 'CANCELLED', updated_at = now(), completed_at = now() "
            "WHERE instance_id = :id AND state IN ('PENDING', 'CLAIMED')"
        ),
        {"id": iid},
    )
    conn.execute(
        text("UPDATE workflow_waits SET state = 'CANCELLED' WHERE instance_id = :id AND state = 'WAITING'"),
        {"id": iid},
    )
    if state != "SUCCEEDED":
        conn.execute(
            text(
                "UPDATE workflow_activations a SET state = 'CANCELLED', completed_at = now() FROM "
                "workflow_steps s "
                "WHERE s.activation_id = a.id AND s.instance_id = :id AND s.state IN ('ACTIVE', 'WAITING')"
            ),
            {"id": iid},
        )
        conn.execute(
            text(
                "UPDATE workflow_steps SET state = 'CANCELLED', revision = revision + 1, updated_at = now() "
                "WHERE instance_id = :id AND state IN ('ACTIVE', 'WAITING')"
            ),
            {"id": iid},
        )
    jobs = conn.execute(
        text(
            "SELECT id FROM workflow_jobs WHERE instance_id = :id AND status IN ('pending', 'paused') "
            "AND type = ANY(CAST(:types AS text[])) ORDER BY id"
        ),
        {"id": iid, "types": sorted(t.value for t in CLEAR_SCOPE)},
    )
    for (job_id,) in jobs.all():
        transitions.cancel_job(conn, job_id, f"workflow {state.lower()}")
    if state != "SUCCEEDED":
        stop_children(conn, inst, state, error)
    from app.engine import signals

    signals.close_pending(conn, iid)


def end_instance(
    conn: Connection, inst: dict, state: str, *, output: Any = MISSING, error: Any = MISSING
) -> dict:
    """The terminal state with completed_at (an error recorded when the stop began is kept), the
    audit row, and the parent's ``subprocess_join`` (same transaction)."""
    iid = inst["id"]
    conn.execute(
        text(
            """
UPDATE workflow_instances SET state = :state, revision = revision + 1, updated_at = now(),
    completed_at = now(), output = CAST(:output AS jsonb), error = COALESCE(CAST(:error AS jsonb), error),
    stop_kind = CASE WHEN :state = 'FAILED' THEN COALESCE(stop_kind, 'FAILURE') ELSE stop_kind END,
    stop_requested_at = CASE WHEN :state = 'FAILED' THEN COALESCE(stop_requested_at, now())
                             ELSE stop_requested_at END
WHERE id = :id
"""
        ),
        {"id": iid, "state": state, "output": jdump(output), "error": jdump(error)},
    )
    conn.execute(
        text(
            "UPDATE workflow_tasks SET state = 'CANCELLED', updated_at = now(), completed_at = now() "
            "WHERE instance_id = :id AND state IN ('PENDING', 'CLAIMED')"
        ),
        {"id": iid},
    )
    from app.engine import oplog

    current = read_instance(conn, iid)
    oplog.advance(
        conn, inst, f"workflow.{state.lower()}", before={"state": inst["state"]}, after={"state": state}
    )
    if current["parent_instance_id"]:
        enqueue(
            conn,
            "subprocess_join",
            {"child_id": iid},
            instance_id=current["parent_instance_id"],
            step_key=current["parent_step_key"],
            idempotency_key=f"subprocess_join:{iid}",
            trace_id=current["trace_id"],
        )
    return current


def finish_instance(
    conn: Connection, inst: dict, state: str, *, output: Any = MISSING, error: Any = MISSING
) -> dict:
    """End the instance now: close its work, then the terminal state."""
    close_work(conn, inst, state, error)
    return end_instance(conn, inst, state, output=output, error=error)


def stop_children(conn: Connection, inst: dict, state: str, error: Any = MISSING) -> None:
    """A parent that ends without success (deadline, step failure) stops its unfinished SUBWORKFLOW
    children: each gets a cancel request with the parent's reason (W-CTL CANCEL semantics: stop_kind
    CANCEL, in-flight tasks collected, compensations, then CANCELLED), like Temporal's REQUEST_CANCEL
    parent close policy. Lock order: parent (already locked), then each child. Children already
    stopping are left."""
    from app.engine import control, oplog
    from app.engine.store import lock_instance

    rows = conn.execute(
        text(
            "SELECT id FROM workflow_instances WHERE parent_instance_id = :id AND stop_requested_at IS NULL "
            "AND state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') ORDER BY id"
        ),
        {"id": inst["id"]},
    ).all()
    code = error.get("code") if isinstance(error, dict) else None
    reason = f"parent workflow {inst['id']} {state.lower()}" + (f" ({code})" if code else "")
    for (child_id,) in rows:
        child = lock_instance(conn, child_id)
        if child["state"] in TERMINAL or child["stop_requested_at"] is not None:
            continue
        control.cancel(conn, child, reason=reason)
        oplog.advance(
            conn,
            child,
            "workflow.control.cancel",
            after={"cause": f"parent {state.lower()}", "parent": inst["id"], "reason": reason},
        )
