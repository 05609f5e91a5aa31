"""The events outbox (SPEC X-EVENT, issue 10): every state change of an instance, step, task or signal
writes one ``workflow_events`` row in the transaction of the change (``app.engine.transitions`` calls
``emit``), so a rollback writes no event and a commit never lacks one.

An event has a stable id, the instance's next sequence number (``workflow_instances.event_seq``, so
concurrent writers of one instance serialize on its row), a type from ``EVENT_TYPES`` and a compact
body (instance summary, step key, activation / task / signal id, trace id; bounded: no inputs or
outputs). Fan-out is batched like River's / Oban's outbox: the first event of a transaction for an
instance enqueues ONE ``event_dispatch`` job (only when the namespace has an enabled subscription or
rule), and every event of that transaction names it in ``dispatch_job_id``. The job fans the rows out
with one idempotency key per (event, subscription) and (event, rule) (``app.integrations.dispatch``).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, text

from app.db import transaction_state
from app.ids import new_id
from app.ledger.enqueue import enqueue
from app.sql import defer, run

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

_INSERT = text(
    """
WITH inst AS (
    UPDATE workflow_instances SET event_seq = event_seq + 1 WHERE id = :iid
    RETURNING namespace_id, definition_id, version, state, paused, business_key, trace_id, event_seq
)
INSERT INTO workflow_events (id, namespace_id, instance_id, seq, type, definition_id, body, dispatch_job_id)
SELECT :id, inst.namespace_id, :iid, inst.event_seq, :type, inst.definition_id,
    jsonb_build_object('instance', jsonb_build_object('id', CAST(:iid AS text),
        'definition_id', inst.definition_id, 'version', inst.version, 'state', inst.state,
        'paused', inst.paused, 'business_key', inst.business_key), 'trace_id', inst.trace_id)
    || CAST(:extra AS jsonb),
    :job
FROM inst
RETURNING seq
"""
)


# Does a namespace have anyone listening (an enabled subscription or rule)? Asked once per transaction and
# instance (a new instance's INSERT asks it in its RETURNING: ``listened_sql``); without listeners the
# events are written but not fanned out.
def listened_sql(namespace_id: str) -> str:
    """SQL: is anyone listening to the events of the namespace ``namespace_id`` (an SQL expression)?"""
    return (
        f"(EXISTS (SELECT 1 FROM event_subscriptions s WHERE s.namespace_id = {namespace_id} AND s.enabled) "
        f"OR EXISTS (SELECT 1 FROM automation_rules r WHERE r.namespace_id = {namespace_id} AND r.enabled))"
    )


_INTEREST = text(
    f"SELECT i.trace_id, {listened_sql('i.namespace_id')} AS listened FROM workflow_instances i WHERE i.id = :iid"
)


def known_listeners(conn: Connection, iid: str, listened: bool, trace_id: str) -> None:
    """Record what this transaction already knows of ``iid``'s listeners (a new instance's INSERT read
    it), so that its first event asks nothing more."""
    jobs: dict[str, int | None] = transaction_state(conn).setdefault("event_dispatch_jobs", {})
    if iid not in jobs:
        jobs[iid] = _new_dispatch_job(conn, iid, trace_id) if listened else None


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
    jobs: dict[str, int | None] = transaction_state(conn).setdefault("event_dispatch_jobs", {})
    if iid not in jobs:
        row = run(conn, _INTEREST, {"iid": iid}).first()
        jobs[iid] = _new_dispatch_job(conn, iid, row.trace_id) if row is not None and row.listened else None
    return jobs[iid]


def emit(conn: Connection, instance_id: str, event_type: str, **fields: Any) -> None:
    """Write one event of ``instance_id`` in ``conn``'s transaction. ``fields`` (step_key,
    activation_id, task_id, signal_id, state, reason, ...) join the body; None values are left out."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type}")
    extra = {k: v for k, v in fields.items() if v is not None}
    defer(
        conn,
        _INSERT,
        {
            "id": new_id(),
            "iid": instance_id,
            "type": event_type,
            "extra": json.dumps(extra, default=str),
            "job": _dispatch_job(conn, instance_id),
        },
    )


def emit_many(conn: Connection, instance_id: str, event_type: str, items: list[dict[str, Any]]) -> None:
    for fields in items:
        emit(conn, instance_id, event_type, **fields)
