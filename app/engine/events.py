"""The events outbox (SPEC X-EVENT) and the engine's audit of its own advances (W-AUDIT-3): every state
change of an instance, step, task or signal is one event of the transaction of the change
(``app.engine.transitions`` calls ``emit``), so a rollback writes no event and a commit never lacks one.

Like Temporal's history nodes, the events of one transaction and instance are written as ONE row of
``workflow_event_batches`` at its commit (``app.engine.commit_batch``), with the audit entries of the engine's
advances in that transaction (``audit``, from ``app.engine.audit_entries``; a start's ``workflow.start`` entry
too, with its actor) and what the transaction changed of the instance (its state and paused flag; the
view adds what never changes from the instance row): an event costs no row and no update of the instance
row of its own. The batch a ``POST /v1/workflows`` writes for its new instance
also keeps the start's response (``start_response``, for a resent start: ``app.engine.start_keys``).
The view ``workflow_events`` shows one row per event: a stable id (the batch's id with the event's
ordinal in its last three hex digits), the instance's next sequence number (continuing from the
instance's newest batch: every writer of an instance's events holds its row lock), a type from
``EVENT_TYPES`` and a compact body (instance summary, step key, activation / task / signal id, trace id;
bounded: no inputs or outputs).

Fan-out is batched like River's / Oban's outbox: the first event of a transaction for an instance
enqueues ONE ``event_dispatch`` job (only when the namespace has an enabled subscription or rule), which
the batch names in ``dispatch_job_id``. The job fans the events out with one idempotency key per (event,
subscription) and (event, rule) (``app.integrations.webhooks``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app import jsonx
from app.engine import commit_batch
from app.engine.commit_batch import CommitBatch, InstanceBatch
from app.ids import new_id
from app.ledger.enqueue import enqueue
from app.observability.logs import redact_url_fields
from app.sql import query, run

# Every event type, with what moves it (docs/integrations.md lists them for users).
EVENT_TYPES: dict[str, str] = {
    "workflow.started": "an instance was created (RUNNING)",
    "workflow.running": "WAITING -> RUNNING (a step became active)",
    "workflow.waiting": "RUNNING -> WAITING (every open step waits)",
    "workflow.paused": "an operator paused the instance",
    "workflow.resumed": "an operator resumed the instance",
    "workflow.cancelling": "a cancel was requested (CANCELLING)",
    "workflow.compensating": "a stop with compensations began (CANCELLING, saga)",
    "workflow.needs_review": "an unknown external outcome or a failed compensation (NEEDS_REVIEW)",
    "workflow.recovered": "an operator's recovery moved the instance out of NEEDS_REVIEW",
    "workflow.succeeded": "terminal: SUCCEEDED",
    "workflow.failed": "terminal: FAILED",
    "workflow.cancelled": "terminal: CANCELLED",
    "step.activated": "a step started an activation (ACTIVE or WAITING)",
    "step.active": "the next task attempt / poll round of a step runs (ACTIVE)",
    "step.waiting": "a step waits between attempts or rounds (WAITING)",
    "step.succeeded": "a step's activation succeeded",
    "step.failed": "a step's activation failed",
    "step.cancelled": "a step's activation was cancelled",
    "step.needs_review": "a step's external outcome is unknown (NEEDS_REVIEW)",
    "step.skipped": "a step was skipped without running (its condition was false, or every dependency was skipped)",
    "task.created": "a task was created (PENDING)",
    "task.completed": "a task was completed by its worker",
    "task.failed": "a task was failed by its worker",
    "task.timed_out": "a task passed its deadline",
    "task.cancelled": "an open task was cancelled",
    "signal.accepted": "a signal was accepted (PENDING)",
    "signal.consumed": "a signal was consumed by a wait",
    "signal.rejected": "a signal was rejected (stale activation, no match, instance ended)",
    "signal.expired": "a pending signal expired",
}

MAX_EVENTS_PER_DISPATCH = 2000  # far above one transaction's events (steps are bounded per definition)


def batch_of(item_id: str) -> str:
    """The id of the batch of an event or engine audit entry id."""
    return item_id[:29] + "000"


def _batches(conn: Connection) -> CommitBatch:
    return commit_batch.of(conn)


def _batch(conn: Connection, iid: str) -> InstanceBatch:
    batches = _batches(conn)
    found = batches.by_instance.get(iid)
    if found is None:
        found = batches.by_instance[iid] = InstanceBatch(_dispatch_job(conn, iid))
    return found


# Does a namespace have anyone listening (an enabled subscription or rule)? Asked once per transaction and
# instance (a new instance's INSERT asks it in its RETURNING: ``listened_sql``); without listeners the
# events are written but not fanned out.
def listened_sql(namespace_id: str) -> str:
    """SQL: is anyone listening to the events of the namespace ``namespace_id`` (an SQL expression)?"""
    return (
        f"(EXISTS (SELECT 1 FROM event_subscriptions s WHERE s.namespace_id = {namespace_id} AND s.enabled) "
        f"OR EXISTS (SELECT 1 FROM automation_rules r WHERE r.namespace_id = {namespace_id} AND r.enabled))"
    )


_INTEREST = query(
    "events_interest_read",
    f"SELECT i.trace_id, {listened_sql('i.namespace_id')} AS listened FROM workflow_instances i WHERE i.id = :iid",
)


def known_listeners(conn: Connection, iid: str, listened: bool, trace_id: str) -> None:
    """Record what this transaction already knows of ``iid``'s listeners (a new instance's INSERT or the
    instance lock read it), so that its first event asks nothing more; the dispatch job is created with
    that first event (a transaction without events creates none)."""
    batches = _batches(conn)
    if iid not in batches.jobs:
        batches.known[iid] = (listened, trace_id)


def _new_dispatch_job(conn: Connection, iid: str, trace_id: str) -> int:
    op = new_id()  # one operation per transaction: its fan-out receipt is its own
    return enqueue(
        conn,
        "event_dispatch",
        {"instance_id": iid},
        instance_id=iid,
        idempotency_key=f"event_dispatch:{op}",
        operation_key=op,
        trace_id=trace_id,
    ).id


def _dispatch_job(conn: Connection, iid: str) -> int | None:
    """The ``event_dispatch`` job of this transaction for ``iid`` (created with its first event)."""
    batches = _batches(conn)
    jobs = batches.jobs
    if iid not in jobs:
        known = batches.known.pop(iid, None)
        if known is None:
            row = run(conn, _INTEREST, {"iid": iid}).first()
            known = (row is not None and row.listened, row.trace_id if row is not None else "")
        listened, trace_id = known
        jobs[iid] = _new_dispatch_job(conn, iid, trace_id) if listened else None
    return jobs[iid]


def emit(conn: Connection, instance_id: str, event_type: str, **fields: Any) -> None:
    """One event of ``instance_id`` in ``conn``'s transaction (written with its batch at commit).
    ``fields`` (step_key, activation_id, task_id, signal_id, state, reason, ...) join the body; None
    values are left out."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type}")
    data = {k: v for k, v in fields.items() if v is not None}
    batch = _batch(conn, instance_id)
    batch.events.append(commit_batch.event_text(batch, event_type, data))


def audit_engine(
    conn: Connection,
    instance_id: str,
    action: str,
    *,
    target_type: str,
    target_id: str,
    operation_id: str,
    before: Any = None,
    after: Any = None,
) -> None:
    """One audit entry of an engine advance of ``instance_id`` (actor ``system:engine``), written with
    the transaction's batch; listed with the operation audit (the view ``workflow_operations``)."""
    _audit(
        conn,
        instance_id,
        {
            "action": action,
            "target_type": target_type,
            "target_id": str(target_id),
            "operation_id": operation_id,
        },
        before=before,
        after=after,
    )


def audit_by(
    conn: Connection,
    instance_id: str,
    action: str,
    *,
    actor_id: str,
    actor_name: str | None,
    request_id: str | None,
    target_type: str,
    target_id: str,
    after: Any = None,
) -> None:
    """One audit entry of ``instance_id`` made by a caller (the ``workflow.start`` of a start), written
    with the transaction's batch instead of an ``operation_audit`` row: the view ``workflow_operations``
    lists it with the columns ``app.audit.record`` would have written (actor, request id, ``after``; a URL
    in ``after`` shows no user info or query values), dated by its transaction's start, so it precedes
    the engine's entries of that transaction."""
    entry = {
        "action": action,
        "target_type": target_type,
        "target_id": str(target_id),
        "actor_id": actor_id,
        "actor_name": actor_name,
        "request_id": request_id,
    }
    _audit(conn, instance_id, entry, after=None if after is None else redact_url_fields(after))


def _audit(
    conn: Connection, instance_id: str, entry: dict[str, Any], *, before: Any = None, after: Any = None
) -> None:
    """Append one audit entry (with ``before`` / ``after`` when given) to the instance's batch."""
    if before is not None:
        entry["before"] = before
    if after is not None:
        entry["after"] = after
    _batch(conn, instance_id).audit.append(jsonx.dumps(entry))


def start_response(conn: Connection, instance_id: str, body: str) -> None:
    """The exact response body of the start that created ``instance_id`` in this transaction, written
    with its batch (``workflow_event_batches.start_response``, read by ``app.engine.start_keys``); the
    start's last write. When a savepoint already wrote the instance's batch (a first step that starts a
    child), a batch without events holds it (no dispatch job: it has nothing to fan out)."""
    batches = _batches(conn)
    found = batches.by_instance.get(instance_id)
    if found is None:
        found = batches.by_instance[instance_id] = InstanceBatch(None)
    found.response = body
