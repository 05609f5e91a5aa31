"""Every write of ``workflow_instances.state`` (and of the flags that gate it: ``paused``,
``cancel_requested_at``, ``stop_kind``, ``compensation``), each guarded by the states it may leave.
A move bumps ``revision``; an operator's decision (pause, resume, cancel) also ``control_revision``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine import events, quotas
from app.engine.row_access import INSTANCE_COLUMNS, MISSING, instance_row, jdump
from app.engine.states import ADVANCING, TERMINAL, InstanceState, values
from app.engine.transitions._guard import many, one, states
from app.ledger import transitions as ledger_moves
from app.sql import query

S = InstanceState
OPEN = [s for s in values(InstanceState) if s not in TERMINAL]
_BUMP = "revision = revision + 1, updated_at = now()"
# the instance columns of an UPDATE ... FROM whose other relation has column names of its own
_W_COLUMNS = ", ".join("w." + c.strip() for c in INSTANCE_COLUMNS.split(","))
_CONTROL = "control_revision = control_revision + 1, " + _BUMP


# The revision a new instance is inserted with: the start's one move of its progress (``set_progress``,
# RUNNING) already counted, so that a start whose first steps leave it RUNNING writes its row once.
STARTED_REVISION = 2


_CREATE = query(
    "instance_create",
    f"""
INSERT INTO workflow_instances (id, namespace_id, definition_id, definition_version_id, version, state, revision,
    input, business_key, queues, deadline_at, trace_id, parent_instance_id, parent_step_key, parent_activation_id,
    parent_element, schedule_id, schedule_fire_at, automation_chain, start_key, start_fingerprint)
VALUES (:id, :ns, :def, :ver, :version, 'RUNNING', {STARTED_REVISION}, CAST(:input AS jsonb), :bk,
    CAST(:queues AS text[]), now() + make_interval(secs => :deadline), :trace, :parent, :parent_step, :parent_act,
    :parent_element, :schedule, :schedule_fire_at, CAST(:chain AS text[]), :start_key, :start_fp)
RETURNING {INSTANCE_COLUMNS}, {events.listened_sql("workflow_instances.namespace_id")} AS listened
""",
)


def create(conn: Connection, row: dict[str, Any]) -> dict[str, Any]:
    """A new instance (W-START-6), inserted as its start settles it in the common case: RUNNING at
    ``STARTED_REVISION`` (the start's ``driver.make_progress`` writes the row again only when its
    first steps leave it elsewhere). ``row["chain"]``: the automation rules that started it (X-AUTO) or
    None; ``row["start_key"]`` / ``row["start_fp"]``: the Idempotency-Key and fingerprint of the start
    request (``app.engine.start_keys``) or None. Returns it as ``row_access.read_instance`` would."""
    created = one(conn, "instance create", row["id"], [], _CREATE, row)
    inst = instance_row(created)
    quotas.instance(conn, inst["namespace_id"], +1)
    events.known_listeners(conn, row["id"], inst.pop("listened"), inst["trace_id"])
    events.emit(conn, row["id"], "workflow.started")
    return inst


# RUNNING <-> WAITING (``:progress``) of instance ``:inst``, guarded by the advancing states
# (``:progress_from``: ``PROGRESS_FROM``); ``o.old``: the state before (an event only when it changed). Also
# a part of the statement of a step's first activation that this move follows (``step_moves.activate``).
def _progress_move(bump: str) -> str:
    return (
        f"UPDATE workflow_instances w SET state = :progress{bump} FROM (SELECT state AS old FROM "
        f"workflow_instances WHERE id = :inst) o WHERE w.id = :inst AND w.state = ANY(:progress_from) "
        f"RETURNING o.old, {_W_COLUMNS}"
    )


PROGRESS_MOVE = _progress_move(f", {_BUMP}")
PROGRESS_FROM = states(ADVANCING)
_SET_PROGRESS = query("instance_set_progress", PROGRESS_MOVE)
# the same when the row already counts this move in its revision (a new instance: ``create``)
_SET_PROGRESS_UNBUMPED = query("instance_set_progress_unbumped", _progress_move(""))


def set_progress(conn: Connection, iid: str, state: str, *, bump: bool = True) -> dict[str, Any]:
    """RUNNING <-> WAITING as the steps move (``decide.progress``); an event when the state changed.
    ``bump`` False: the row already counts this move in ``revision`` (a new instance, ``create``).
    Returns the instance as ``row_access.read_instance`` would."""
    row = one(
        conn,
        f"instance -> {state}",
        iid,
        ADVANCING,
        _SET_PROGRESS if bump else _SET_PROGRESS_UNBUMPED,
        {"inst": iid, "progress": state, "progress_from": PROGRESS_FROM},
    )
    return progressed(conn, iid, state, row)


def progressed(conn: Connection, iid: str, state: str, row: Any) -> dict[str, Any]:
    """The instance ``PROGRESS_MOVE`` moved to ``state`` (``row``: its returned row, ``old`` among its
    columns): its event when the state changed. Returns the instance as ``row_access.read_instance``
    would."""
    inst = instance_row(row)
    if inst.pop("old") != state:
        events.emit(conn, iid, "workflow.running" if state == S.RUNNING else "workflow.waiting")
    return inst


_Q_INSTANCE_TOUCH = query(
    "instance_touch",
    f"UPDATE workflow_instances SET {_BUMP} WHERE id = :id AND state = ANY(:from) RETURNING {INSTANCE_COLUMNS}",
)


def touch(conn: Connection, iid: str) -> dict[str, Any]:
    """Background progress without a state change (a step moved): ``revision`` + 1. Returns the
    instance as ``row_access.read_instance`` would."""
    return instance_row(
        one(
            conn,
            "instance revision",
            iid,
            OPEN,
            _Q_INSTANCE_TOUCH,
            {"id": iid, "from": OPEN},
        )
    )


_END_MOVE = f"""UPDATE workflow_instances SET state = :state, {_BUMP}, completed_at = now(), output = CAST(:output AS jsonb),
    paused = false, paused_at = NULL,
    error = COALESCE(CAST(:error AS jsonb), error),
    stop_kind = CASE WHEN :state = 'FAILED' THEN COALESCE(stop_kind, 'FAILURE') ELSE stop_kind END,
    stop_requested_at = CASE WHEN :state = 'FAILED' THEN COALESCE(stop_requested_at, now())
                             ELSE stop_requested_at END
WHERE id = :id AND state = ANY(:from) RETURNING {INSTANCE_COLUMNS}"""
_END = query("instance_end", f"\n{_END_MOVE}\n")
# The end with the cancel of the instance's jobs that wait to run (``ledger.transitions.CANCEL_WAITING_CTES``,
# as ``cancel_waiting`` writes it: locked in id order after the instance's own lock), one statement instead
# of two (``stopping.finish``). A refused end (no row) rolls the cancel back with the transaction.
_END_CANCELLING_WAITING_JOBS = query(
    "instance_end_cancelling_waiting_jobs", f"\nWITH {ledger_moves.CANCEL_WAITING_CTES}\n{_END_MOVE}\n"
)


def end(
    conn: Connection,
    iid: str,
    state: str,
    *,
    output: Any = MISSING,
    error: Any = MISSING,
    cancel_waiting: tuple[list[str], str] | None = None,
) -> dict[str, Any]:
    """The terminal state, once: SUCCEEDED (with output), FAILED (stop_kind FAILURE unless a stop was
    already recorded), CANCELLED. An error recorded when the stop began is kept. A workflow that ends is
    never paused: a pause stops new work, not the end that results of work already granted (a task in
    flight, a signal its wait consumed) bring, so the end clears the flag (docs/reference.md, "Pause").
    ``cancel_waiting``: ``(job types, reason)``: the same statement cancels the instance's jobs of those
    types that wait to run (``ledger.transitions.cancel_waiting``). Returns the row as it now is."""
    params = {"id": iid, "state": state, "output": jdump(output), "error": jdump(error), "from": OPEN}
    if cancel_waiting is not None:
        params.update(ledger_moves.instance_cancel_params(iid, *cancel_waiting))
    row = one(
        conn,
        f"instance -> {state}",
        iid,
        OPEN,
        _END if cancel_waiting is None else _END_CANCELLING_WAITING_JOBS,
        params,
    )
    quotas.instance(conn, row.namespace_id, -1)
    events.emit(conn, iid, f"workflow.{state.lower()}")
    return instance_row(row)


_Q_INSTANCE_PAUSE = query(
    "instance_pause",
    f"UPDATE workflow_instances SET paused = true, paused_at = now(), {_CONTROL} "
    "WHERE id = :id AND NOT paused AND state = ANY(:from) RETURNING id",
)


def pause(conn: Connection, iid: str) -> None:
    one(
        conn,
        "pause",
        iid,
        OPEN,
        _Q_INSTANCE_PAUSE,
        {"id": iid, "from": OPEN},
    )
    events.emit(conn, iid, "workflow.paused")


_Q_INSTANCE_RESUME = query(
    "instance_resume",
    f"UPDATE workflow_instances w SET paused = false, paused_at = NULL, {_CONTROL} "
    "FROM (SELECT paused_at AS was FROM workflow_instances WHERE id = :id) o "
    "WHERE w.id = :id AND w.paused AND w.state = ANY(:from) "
    "RETURNING COALESCE(now() - o.was, interval '0') AS paused_for",
)


def resume(conn: Connection, iid: str) -> Any:
    """Returns how long the instance was paused (an interval; zero for a pause older than its record)."""
    row = one(
        conn,
        "resume",
        iid,
        OPEN,
        _Q_INSTANCE_RESUME,
        {"id": iid, "from": OPEN},
    )
    events.emit(conn, iid, "workflow.resumed")
    return row.paused_for


CANCELLABLE = [S.RUNNING, S.WAITING, S.NEEDS_REVIEW]


_Q_INSTANCE_REQUEST_CANCEL = query(
    "instance_request_cancel",
    f"""
UPDATE workflow_instances SET state = 'CANCELLING', {_CONTROL}, cancel_requested_at = now(),
    stop_kind = COALESCE(stop_kind, 'CANCEL'), stop_requested_at = COALESCE(stop_requested_at, now())
WHERE id = :id AND cancel_requested_at IS NULL AND state = ANY(:from) RETURNING id
""",
)


def request_cancel(conn: Connection, iid: str) -> None:
    """W-CTL CANCEL: CANCELLING with cancel_requested_at; a first stop target is kept."""
    one(
        conn,
        "cancel",
        iid,
        CANCELLABLE,
        _Q_INSTANCE_REQUEST_CANCEL,
        {"id": iid, "from": states(CANCELLABLE)},
    )
    events.emit(conn, iid, "workflow.cancelling")


_Q_INSTANCE_START_COMPENSATION = query(
    "instance_start_compensation",
    f"""
UPDATE workflow_instances SET state = 'CANCELLING', {_BUMP}, compensation = CAST(:c AS jsonb),
    error = COALESCE(CAST(:e AS jsonb), error), stop_kind = COALESCE(stop_kind, :k),
    stop_requested_at = COALESCE(stop_requested_at, now())
WHERE id = :id AND state = ANY(:from) RETURNING id
""",
)


def start_compensation(conn: Connection, iid: str, comp: dict, *, stop_kind: str, error: Any) -> None:
    """A stop with compensations to run: CANCELLING (stop_kind says where it is going) with the plan."""
    one(
        conn,
        "start compensation",
        iid,
        OPEN,
        _Q_INSTANCE_START_COMPENSATION,
        {"id": iid, "c": jdump(comp), "e": jdump(error), "k": stop_kind, "from": OPEN},
    )
    events.emit(conn, iid, "workflow.compensating", stop_kind=stop_kind)


_Q_INSTANCE_SAVE_COMPENSATION = query(
    "instance_save_compensation",
    f"UPDATE workflow_instances SET compensation = CAST(:c AS jsonb), state = COALESCE(:s, state), {_BUMP} "
    "WHERE id = :id AND state = ANY(:from) RETURNING id",
)


def save_compensation(conn: Connection, iid: str, comp: dict, state: str | None = None) -> None:
    """The saga's progress; ``state`` CANCELLING (next compensation), NEEDS_REVIEW (one failed) or
    None (unchanged: the chain is done or abandoned and ``end`` follows)."""
    one(
        conn,
        f"compensation -> {comp.get('state')}",
        iid,
        OPEN,
        _Q_INSTANCE_SAVE_COMPENSATION,
        {"id": iid, "c": jdump(comp), "s": state, "from": OPEN},
    )
    if state == S.NEEDS_REVIEW:
        events.emit(conn, iid, "workflow.needs_review", reason="compensation failed")


_Q_INSTANCE_SET_COMPENSATION_TASK = query(
    "instance_set_compensation_task",
    "UPDATE workflow_instances SET compensation = compensation || jsonb_build_object('task_id', "
    f"CAST(:t AS text)), {_BUMP} WHERE id = :id AND state = 'CANCELLING' RETURNING id",
)


def set_compensation_task(conn: Connection, iid: str, task_id: str) -> None:
    one(
        conn,
        "compensation task",
        iid,
        [S.CANCELLING],
        _Q_INSTANCE_SET_COMPENSATION_TASK,
        {"id": iid, "t": task_id},
    )


_Q_INSTANCE_TO_REVIEW = query(
    "instance_to_review",
    f"UPDATE workflow_instances SET state = 'NEEDS_REVIEW', {_BUMP} WHERE id = :id AND state = ANY(:from) "
    "RETURNING id",
)


def to_review(conn: Connection, iid: str) -> None:
    """An unknown external outcome: NEEDS_REVIEW until an operator resolves it (X-RECOVER)."""
    one(
        conn,
        "instance -> NEEDS_REVIEW",
        iid,
        OPEN,
        _Q_INSTANCE_TO_REVIEW,
        {"id": iid, "from": OPEN},
    )
    events.emit(conn, iid, "workflow.needs_review", reason="external outcome unknown")


REVIEWABLE = [S.NEEDS_REVIEW, S.RUNNING, S.WAITING, S.CANCELLING]


_LEAVE_REVIEW = query(
    "instance_leave_review",
    f"UPDATE workflow_instances SET state = :s, {_BUMP} WHERE id = :id AND state = ANY(:from) RETURNING id",
)
_LEAVE_REVIEW_UNBUMPED = query(
    "instance_leave_review_unbumped",
    "UPDATE workflow_instances SET state = :s WHERE id = :id AND state = ANY(:from) RETURNING id",
)


def leave_review(conn: Connection, iid: str, state: str, *, bump: bool = True) -> None:
    """Operator recovery: back to RUNNING (progress recomputes it) or CANCELLING (a cancel settles).
    ``bump`` False: the step recovery already counted this decision in ``revision``."""
    one(
        conn,
        f"instance -> {state}",
        iid,
        REVIEWABLE,
        _LEAVE_REVIEW if bump else _LEAVE_REVIEW_UNBUMPED,
        {"id": iid, "s": state, "from": states(REVIEWABLE)},
    )
    events.emit(conn, iid, "workflow.recovered", state=state)


_UNFINISHED_CHILDREN = query(
    "instance_unfinished_children",
    "SELECT id FROM workflow_instances WHERE parent_instance_id = :id AND stop_requested_at IS NULL "
    "AND state = ANY(:open) ORDER BY id",
)


def unfinished_children(conn: Connection, iid: str) -> list[str]:
    """Children of ``iid`` that are not ending yet (read; the caller locks each before moving it)."""
    return [
        r[0]
        for r in many(
            conn,
            _UNFINISHED_CHILDREN,
            {"id": iid, "open": OPEN},
        )
    ]
