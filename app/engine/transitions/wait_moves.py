"""Every write of ``workflow_waits.state``: a TIMER or SIGNAL wait of one activation is WAITING until it
is resolved (timer due, signal consumed, poll resolved), expires, or is canceled with its work."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine.row_access import jparse, reading_steps_after, write_reading_steps
from app.engine.states import StepState, WaitState
from app.engine.transitions._guard import TransitionRefused, many, maybe
from app.engine.transitions.step_moves import OPEN, closed
from app.ids import new_id
from app.sql import query, run

S = WaitState


# A WAITING wait, by its deadline: a TIMER's (``:secs`` from now), a SIGNAL's with a timeout (``:secs`` from
# now, at most the instance's deadline), a SIGNAL's without one (the instance's deadline).
_INSERT = {
    "now() + make_interval(secs => :secs)": query(
        "wait_insert_after_seconds",
        "INSERT INTO workflow_waits (id, instance_id, activation_id, kind, name, payload_version, correlation_key, "
        "deadline_at) VALUES (:id, :inst, :act, :kind, :name, :pv, :corr, now() + make_interval(secs => :secs)) "
        "RETURNING deadline_at",
    ),
    "LEAST(now() + make_interval(secs => :secs), :inst_deadline)": query(
        "wait_insert_after_seconds_within_deadline",
        "INSERT INTO workflow_waits (id, instance_id, activation_id, kind, name, payload_version, correlation_key, "
        "deadline_at) VALUES (:id, :inst, :act, :kind, :name, :pv, :corr, "
        "LEAST(now() + make_interval(secs => :secs), :inst_deadline)) RETURNING deadline_at",
    ),
    ":inst_deadline": query(
        "wait_insert_until_deadline",
        "INSERT INTO workflow_waits (id, instance_id, activation_id, kind, name, payload_version, correlation_key, "
        "deadline_at) VALUES (:id, :inst, :act, :kind, :name, :pv, :corr, :inst_deadline) RETURNING deadline_at",
    ),
}
# A timer's firing, in ONE statement: its wait, WAITING and due, RESOLVED by the job's operation (its
# receipt) while its step waits on it (the step's current activation is the wait's, WAITING:
# ``decide.wakes.timer_due``), and that step with its activation WAITING -> SUCCEEDED (``step_moves.succeed``'s
# move and guard: the step WAITING, its activation one of ``step_moves.OPEN``) only when the wait resolved;
# with the instance's steps as they were before (``row_access.write_reading_steps``). The row says whether
# each moved: a wait resolved without its step is refused (``try_fire_due``).
_FIRE_DUE = reading_steps_after(
    "wait_fire_due",
    "r AS (UPDATE workflow_waits SET state = 'RESOLVED', resolved_at = now(), resolved_by_operation = :op "
    "WHERE activation_id = :a AND instance_id = :steps_of_instance AND state = 'WAITING' "
    "AND deadline_at <= now() AND EXISTS (SELECT 1 FROM workflow_steps s WHERE s.activation_id = :a "
    "AND s.instance_id = :steps_of_instance AND s.state = 'WAITING') RETURNING id), "
    "c AS (UPDATE workflow_steps SET state = 'SUCCEEDED', act_state = 'SUCCEEDED', completed_at = now(), "
    "revision = revision + 1, updated_at = now() "
    "WHERE activation_id = :a AND instance_id = :steps_of_instance AND state = 'WAITING' "
    "AND act_state = ANY(:open) AND EXISTS (SELECT 1 FROM r) RETURNING id, act_output::text AS act_output)",
    "SELECT r.id AS wait_id, c.id AS step_id, c.act_output FROM r LEFT JOIN c ON true",
)
_EXPIRE_DUE = query(
    "wait_expire_due",
    "UPDATE workflow_waits SET state = 'EXPIRED', resolved_at = now(), resolved_by_operation = :op "
    "WHERE activation_id = :a AND state = 'WAITING' AND deadline_at <= now() RETURNING id",
)


def insert(
    conn: Connection,
    iid: str,
    act_id: str,
    kind: str,
    deadline_sql: str,
    *,
    name: str | None = None,
    payload_version: str | None = None,
    correlation_key: str | None = None,
    **params: Any,
) -> Any:
    """A WAITING wait; returns its ``deadline_at`` (``deadline_sql``, one of ``_INSERT``'s, over ``params``)."""
    return run(
        conn,
        _INSERT[deadline_sql],
        {
            "id": new_id(),
            "inst": iid,
            "act": act_id,
            "kind": kind,
            "name": name,
            "pv": payload_version,
            "corr": correlation_key,
            **params,
        },
    ).scalar_one()


def try_fire_due(
    conn: Connection, instance_id: str, act_id: str, operation_key: str
) -> tuple[Any, list[dict[str, Any]]] | None:
    """A timer fired: its wait WAITING and due -> RESOLVED by the job operation ``operation_key``,
    recorded on the wait (its receipt, ``ended_by``), and its step with its current activation WAITING ->
    SUCCEEDED, when the step of activation ``act_id`` still waits on it; one statement (``_FIRE_DUE``).
    Returns the step's output as its row holds it and the instance's steps as they were before
    (``row_access.read_steps``: the fired step still WAITING there, for its caller to settle). Run it under
    the instance's lock. None: not due, settled first, or its step no longer waits on it."""
    written, steps = write_reading_steps(
        conn, _FIRE_DUE, {"a": act_id, "op": operation_key, "open": OPEN}, instance_id
    )
    if written is None:
        return None
    step = next((s for s in steps if s["activation_id"] == act_id), None)
    if written.step_id is None or step is None:  # the statement failed its guard half-way: nothing stays
        raise TransitionRefused(f"the timer step of activation {act_id} -> SUCCEEDED", act_id, OPEN)
    closed(conn, instance_id, step, StepState.SUCCEEDED)
    return jparse(written.act_output), steps


def try_expire_due(conn: Connection, act_id: str, operation_key: str) -> bool:
    """A signal wait's timeout passed: WAITING and due -> EXPIRED by the job operation ``operation_key``
    (recorded as by ``try_fire_due``)."""
    return (
        maybe(
            conn,
            _EXPIRE_DUE,
            {"a": act_id, "op": operation_key},
        )
        is not None
    )


# The wait is locked whether or not this operation ended it: an execution of the same operation that
# runs meanwhile waits here for this one's commit and then reads its stamp (the row is re-read after the
# lock). The step key is looked up only when the stamp is this operation's.
_ENDED_BY = query(
    "wait_ended_by",
    "SELECT w.resolved_by_operation = :op AS mine, CASE WHEN w.resolved_by_operation = :op THEN "
    "(SELECT s.key FROM workflow_all_activations a JOIN workflow_steps s ON s.id = a.step_id "
    "WHERE a.id = w.activation_id) END AS step_key "
    "FROM workflow_waits w WHERE w.activation_id = :a AND w.instance_id = :i FOR UPDATE OF w",
)


def ended_by(conn: Connection, iid: str | None, act_id: str | None, operation_key: str) -> str | None:
    """Lock the wait of activation ``act_id`` of instance ``iid``; the key of its step when the job
    operation ``operation_key`` resolved or expired it (``try_fire_due``, ``try_expire_due``), else None
    (still WAITING, ended otherwise, or no such wait)."""
    row = run(conn, _ENDED_BY, {"a": act_id, "i": iid, "op": operation_key}).first()
    return row.step_key if row is not None and row.mine else None


_Q_WAIT_RESOLVE_BY_SIGNAL = query(
    "wait_resolve_by_signal",
    "UPDATE workflow_waits SET state = 'RESOLVED', winner_signal_id = :s, resolved_at = now() "
    "WHERE id = :w AND state = 'WAITING' RETURNING id",
)


def resolve_by_signal(conn: Connection, wait_id: str, signal_id: str) -> bool:
    return (
        maybe(
            conn,
            _Q_WAIT_RESOLVE_BY_SIGNAL,
            {"w": wait_id, "s": signal_id},
        )
        is not None
    )


_Q_WAIT_RESOLVE_OPEN = query(
    "wait_resolve_open",
    "UPDATE workflow_waits SET state = 'RESOLVED', resolved_at = now() "
    "WHERE activation_id = :a AND state = 'WAITING' RETURNING id",
)


def resolve_open(conn: Connection, act_id: str) -> int:
    """A POLL resolved by its task: its final-signal wait (if any) is RESOLVED too."""
    return len(
        many(
            conn,
            _Q_WAIT_RESOLVE_OPEN,
            {"a": act_id},
        )
    )


_CANCEL_OPEN = query(
    "wait_cancel_open",
    "UPDATE workflow_waits SET state = 'CANCELLED' WHERE instance_id = :v AND state = 'WAITING' RETURNING id",
)
_CANCEL_OPEN_OF_ACTIVATION = query(
    "wait_cancel_open_of_activation",
    "UPDATE workflow_waits SET state = 'CANCELLED' WHERE activation_id = :v AND state = 'WAITING' RETURNING id",
)


def cancel_open(conn: Connection, *, instance_id: str | None = None, activation_id: str | None = None) -> int:
    """WAITING waits of an instance or of one activation -> CANCELLED."""
    if instance_id is None and activation_id is None:
        raise ValueError("cancel_open needs an instance or an activation")
    statement, val = (
        (_CANCEL_OPEN, instance_id)
        if instance_id is not None
        else (_CANCEL_OPEN_OF_ACTIVATION, activation_id)
    )
    return len(many(conn, statement, {"v": val}))
