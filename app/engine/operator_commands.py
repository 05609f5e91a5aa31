"""The operator commands (W-CTL, X-RECOVER, W-SIG, L-STATUS directed recovery): each one function that
takes the acting principal and the request id, runs the command, writes its audit row and returns the
view the API answers with. The HTTP API (``web``), the console and the ``ledgerflow`` CLI all call these,
so a command reads, audits and answers the same whichever door it came through.

Workflow commands run in the caller's transaction (the API's idempotent wrapper, the console's or the
CLI's ``transaction()``) and first find the instance as the principal may see it (W-API-1). The
engine-health actions (drain, hints, reclaim a lost node) are platform-wide: the caller checks that the
principal is a platform-wide operator.

The job ledger's operator commands (retry, skip, batch, replay) already follow this shape one layer
down, in ``app.ledger.job_actions`` (its ``Actor`` carries the principal and request id)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from app import audit
from app.auth import Principal
from app.db import get_engine, transaction
from app.engine import audit_entries, control, instances, recovery, retention, signals
from app.engine.row_access import read_instance
from app.engine.task_protocol import return_expired_leases
from app.errors import NotFound, StateConflict
from app.ids import is_hex32
from app.ledger import drain, hints, nodes, status, transitions
from app.settings import get_settings


# --------------------------------------------------------------------------- who may see an instance
def check_queue_scope(principal: Principal, queues: list[str]) -> None:
    """W-API-1 / W-ERR: a resource on a queue outside the credential's scope is not found."""
    if any(not principal.can_use_queue(q) for q in queues):
        raise NotFound("not found")


def visible_instance(conn: Connection, principal: Principal, instance_id: str) -> dict:
    """W-API-1: an instance of the principal's namespace whose pinned definition's queues are all in
    the credential's scope; anything else is 404."""
    if not is_hex32(instance_id):
        raise NotFound("workflow not found")
    inst = read_instance(conn, instance_id, principal.namespace_id)
    check_queue_scope(principal, list(inst["queues"]))
    return inst


# --------------------------------------------------------------------------- workflow commands
def control_workflow(
    conn: Connection, principal: Principal, instance_id: str, req: dict, *, request_id: str
) -> dict:
    """W-CTL: pause, resume or cancel (a loaded ``ControlRequest``) with its audit row; the instance view."""
    visible_instance(conn, principal, instance_id)
    before, after = control.control(conn, instance_id, req)
    view = instances.instance_view(after)
    audit_entries.operation(
        conn,
        principal,
        instance_id,
        f"workflow.control.{req['operation'].lower()}",
        request_id=request_id,
        reason=req["reason"],
        before=instances.instance_view(before),
        after=view,
    )
    return view


def recover_workflow(
    conn: Connection, principal: Principal, instance_id: str, req: dict, *, request_id: str
) -> dict:
    """X-RECOVER (a loaded ``RecoveryRequest``) with its audit row ``workflow.recovery.<action>``:
    RETRY_STEP, SUCCEED_STEP or FAIL_STEP of a step in review (audited against the step; answers
    ``{"instance", "step", "operation_id"}``), or RESOLVE_INSTANCE (CONTINUE, CANCEL or FAIL) of an
    instance in review (audited against the instance; ``{"instance", "resolution", "operation_id"}``)."""
    visible_instance(conn, principal, instance_id)
    if req["action"] == "RESOLVE_INSTANCE":
        before, after, summary = recovery.resolve_instance(conn, instance_id, req)
        detail, target = {"resolution": summary}, {}
    else:
        before, after, step = recovery.recover(conn, instance_id, req)
        detail, target = {"step": step}, {"target_type": "step", "target_id": req["step_key"]}
    view = instances.instance_view(after)
    audit_id = audit_entries.operation(
        conn,
        principal,
        instance_id,
        f"workflow.recovery.{req['action'].lower()}",
        request_id=request_id,
        reason=req["reason"],
        evidence_ref=req["evidence_ref"],
        before=instances.instance_view(before),
        after={"instance": view, **detail},
        **target,
    )
    return {"instance": view, **detail, "operation_id": audit_id}


def send_signal(
    conn: Connection, principal: Principal, instance_id: str, req: dict, *, request_id: str
) -> dict:
    """W-SIG: accept one signal (a loaded ``SignalRequest``); its acceptance is audited on the signal
    resource (X-HIST), not in the workflow's operations list (W-AUDIT-3), as soon as the row exists.
    The signal view."""
    visible_instance(conn, principal, instance_id)

    def audit_accepted(conn: Connection, sig: dict) -> None:
        audit_entries.operation(
            conn,
            principal,
            instance_id,
            "signal.accepted",
            request_id=request_id,
            reason=req["reason"],
            evidence_ref=req["evidence_ref"],
            after=signals.signal_view(sig),
            target_type="signal",
            target_id=sig["id"],
        )

    sig = signals.send(conn, instance_id, principal.actor_id, req, on_accepted=audit_accepted)
    return signals.signal_view(sig)


# --------------------------------------------------------------------------- engine health (directed recovery)
def _read_drain_preview() -> dict[str, Any]:
    with get_engine().connect() as conn, conn.begin():
        return status.drain_preview(conn)


def _audit_engine(
    principal: Principal, action: str, reason: str, before: Any, after: Any, *, request_id: str
) -> None:
    with transaction() as conn:
        audit.record(
            conn,
            principal=principal,
            request_id=request_id,
            action=action,
            target_type="engine",
            target_id=action.split(".", 1)[1],
            reason=reason,
            before=before,
            after=after,
        )


def drain_now(principal: Principal, reason: str, *, request_id: str) -> dict[str, Any]:
    """Run the drain once now (expired leases and passed deadlines reclaimed, expired task leases
    returned, due queues hinted), audited as ``engine.drain`` with the preview it ran against. The
    drain takes its own short transactions (and its advisory lock: ``ran`` is false when it runs
    elsewhere). Returns what it did (the audit's ``after``)."""
    before = _read_drain_preview()
    report = drain.drain(get_engine(), get_settings(), sweeps=[("task_leases", return_expired_leases)])
    after = {
        "ran": report.ran,
        "reclaimed_to_pending": report.to_pending,
        "reclaimed_to_dead": report.to_dead,
        "reclaimed_ids": [str(r["id"]) for r in report.reclaimed[:100]],
        "swept": report.swept,
        "hinted_queues": report.hinted_queues,
    }
    preview = {
        "stuck": before["stuck"],
        "stuck_ids": [r["id"] for r in before["stuck_sample"]],
        "due_by_queue": before["due_by_queue"],
    }
    _audit_engine(principal, "engine.drain", reason, preview, after, request_id=request_id)
    return after


def republish_hints(principal: Principal, reason: str, *, request_id: str) -> dict[str, Any]:
    """A wake hint for every queue with due jobs now, audited as ``engine.republish_hints``:
    ``{"published": {queue: sent}}`` (queues in name order)."""
    due = _read_drain_preview()["due_by_queue"]
    after = {"published": {q: hints.publish_now(q) for q in sorted(due)}}
    _audit_engine(
        principal, "engine.republish_hints", reason, {"due_by_queue": due}, after, request_id=request_id
    )
    return after


def reclaim_node(
    conn: Connection, principal: Principal, node_id: str, reason: str, *, request_id: str
) -> dict[str, Any]:
    """The running jobs of a lost worker node reclaimed now (as an expired lease would be), audited as
    ``engine.reclaim_node``: ``{"reclaimed": [{"id", "status"}]}``. A live node is refused (409)."""
    settings = get_settings()
    before = nodes.node_detail(conn, node_id[:64])
    if before is None:
        raise NotFound("no such worker node")
    if before["live"]:
        raise StateConflict("this node is live (a heartbeat within 90 s): its jobs are not reclaimed")
    moved = transitions.reclaim_lost_node(
        conn,
        node_id,
        limit=settings.drain_batch,
        backoff_base=settings.backoff_base_seconds,
        backoff_cap=settings.backoff_cap_seconds,
    )
    after = {"reclaimed": [{"id": str(m["id"]), "status": m["status"]} for m in moved]}
    audit.record(
        conn,
        principal=principal,
        request_id=request_id,
        action="engine.reclaim_node",
        target_type="worker_node",
        target_id=node_id,
        reason=reason,
        before={"running_jobs": [j["id"] for j in before["running_jobs"]]},
        after=after,
    )
    return after


# --------------------------------------------------------------------------- retention of finished workflows
def hold_workflow(
    conn: Connection,
    principal: Principal,
    instance_id: str,
    until: datetime | None,
    reason: str,
    *,
    request_id: str,
) -> dict[str, Any]:
    """An operator's hold (or its release, ``until`` None): retention keeps the workflow at least until
    ``until`` (``app.engine.retention``). Any workflow may be held, finished or not (a hold set while it
    runs counts once it ends). Audited as ``workflow.hold``; answers the workflow's retention."""
    inst = visible_instance(conn, principal, instance_id)
    view = retention.set_hold(conn, inst, until)
    view["operation_id"] = audit_entries.operation(
        conn,
        principal,
        instance_id,
        "workflow.hold",
        request_id=request_id,
        reason=reason,
        before={"hold_until": inst.get("hold_until")},
        after={"hold_until": view["hold_until"]},
    )
    return view
