"""Every write of ``workflow_tasks.state`` (X-TASK): insert, claim (epoch + 1), the results of a claim
(fenced by epoch + ``CLAIMED`` + an unexpired lease), time-out, the lease sweep and the cancels."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine import events
from app.engine.row_access import (
    MISSING,
    jdump,
    jparse,
    reading_steps,
    reading_steps_after,
    write_reading_steps,
)
from app.engine.states import STEP_OPEN, TASK_OPEN, TaskState, task_open_sql
from app.engine.transitions._guard import TransitionRefused, many, maybe, states
from app.sql import Query, query, run, split_rows

S = TaskState
OPEN = states(TASK_OPEN)
# A task's output as JSON text. A completion that closes its step (``complete_closing_step``) keeps the output
# once, on the step's activation (``act_output``; ``workflow_activations.output`` once the step is activated
# again), and leaves the task's column SQL NULL: a COMPLETED task without an output of its own answers its
# activation's (no other completion of that activation's tasks closes it: a failed attempt before has no
# output; a POLL's rounds, a fan-out's elements and a compensation keep theirs). No comma inside: the
# columns are split at commas (``row_access.lock_with_task``).
TASK_OUTPUT = """CASE WHEN t.output IS NULL AND t.state = 'COMPLETED'
        THEN (SELECT o.output::text FROM workflow_all_activations o WHERE o.id = t.activation_id)
        ELSE t.output::text END AS output"""


def task_cols(output: str = TASK_OUTPUT) -> str:
    """The task's columns as the engine reads them (JSON as text), its output as ``output`` says."""
    return f"""t.id, t.namespace_id, t.instance_id, t.step_id, t.step_key, t.activation_id, t.queue, t.state,
    t.input::text AS input, {output}, t.error::text AS error, t.epoch, t.attempt,
    t.poll_round,
    t.lease_expires_at, t.deadline_at, t.created_at, t.updated_at, t.completed_at, t.purpose,
    (t.state = 'CLAIMED' AND t.lease_expires_at <= now()) AS lease_expired"""


TASK_COLS = task_cols()
_DONE = "completed_at = now(), updated_at = now(), lease_expires_at = NULL"
_EVENT_COLS = "RETURNING id, namespace_id, queue, instance_id, step_key, activation_id, purpose"


def _task_event(conn: Connection, event_type: str, row: Any) -> None:
    """An open task closed (completed, failed, timed out, cancelled): its event."""
    events.emit(
        conn,
        row.instance_id,
        event_type,
        task_id=row.id,
        step_key=row.step_key,
        activation_id=row.activation_id,
        purpose=row.purpose,
    )


# the tasks of elements ``:elements`` of a fan-out step (STEP tasks; migration 0027), with their ids and
# inputs (JSON text) in the same order: one statement however many elements start together
TASK_INSERT_ELEMENTS = query(
    "task_insert_elements",
    """
INSERT INTO workflow_tasks (id, namespace_id, instance_id, step_id, step_key, activation_id, queue, input,
    attempt, deadline_at, purpose, instance_created_at, element)
SELECT e.id, :ns, :inst, :step, :key, :act, :queue, CAST(e.input AS jsonb), :attempt,
    now() + make_interval(secs => :timeout), 'STEP', :instance_created_at, e.element
FROM unnest(CAST(:ids AS text[]), CAST(:inputs AS text[]), CAST(:elements AS integer[])) AS e(id, input, element)
""",
)
TASK_INSERT = query(
    "task_insert",
    """
INSERT INTO workflow_tasks (id, namespace_id, instance_id, step_id, step_key, activation_id, queue, input,
    attempt, poll_round, deadline_at, purpose, instance_created_at)
VALUES (:id, :ns, :inst, :step, :key, :act, :queue, CAST(:input AS jsonb), :attempt, :round,
    now() + make_interval(secs => :timeout), :purpose, :instance_created_at)
""",
)
# a compensation task: its input also carries the compensated activation's output (``:output``, JSON text,
# NULL for SQL NULL)
TASK_INSERT_COMPENSATION = query(
    "task_insert_compensation",
    """
INSERT INTO workflow_tasks (id, namespace_id, instance_id, step_id, step_key, activation_id, queue, input,
    attempt, poll_round, deadline_at, purpose, instance_created_at)
VALUES (:id, :ns, :inst, :step, :key, :act, :queue,
    CAST(:input AS jsonb) || jsonb_build_object('output', COALESCE(CAST(:output AS jsonb), 'null'::jsonb)),
    :attempt, :round, now() + make_interval(secs => :timeout), :purpose, :instance_created_at)
""",
)


def insert(conn: Connection, row: dict[str, Any], *, into: list[dict[str, Any]] | None = None) -> None:
    """A PENDING task, due by ``deadline_at`` = now + ``timeout`` seconds, claimed in the order of
    ``instance_created_at`` (its instance's ``created_at``). ``into``: the row is appended there instead,
    for the statement of its step's first activation, which inserts it with the step's row
    (``step_moves.activate``)."""
    params = {"round": None, "purpose": "STEP", "output": None, **row}
    if into is not None:
        if params["purpose"] == "COMPENSATION":
            raise ValueError("a compensation task is inserted on its own")
        into.append(params)
    else:
        run(conn, TASK_INSERT_COMPENSATION if params["purpose"] == "COMPENSATION" else TASK_INSERT, params)
    events.emit(
        conn,
        row["inst"],
        "task.created",
        task_id=row["id"],
        step_key=row["key"],
        activation_id=row["act"],
        queue=row["queue"],
        purpose=row.get("purpose", "STEP"),
    )


def insert_elements(
    conn: Connection, row: dict[str, Any], elements: list[tuple[int, str, str | None]]
) -> None:
    """The PENDING tasks of a fan-out step's ``elements`` (``(index, task id, input as JSON text or None)``),
    each as ``insert`` would insert it with ``row``'s other columns, in one statement; each its
    ``task.created`` event."""
    if not elements:
        return
    run(
        conn,
        TASK_INSERT_ELEMENTS,
        {
            **row,
            "elements": [e[0] for e in elements],
            "ids": [e[1] for e in elements],
            "inputs": [e[2] for e in elements],
        },
    )
    for _, task_id, _ in elements:
        events.emit(
            conn,
            row["inst"],
            "task.created",
            task_id=task_id,
            step_key=row["key"],
            activation_id=row["act"],
            queue=row["queue"],
            purpose="STEP",
        )


# The claim and its receipt in one statement. ``prior``: the tasks a claim with this Idempotency-Key
# (``:key``; NULL for a claim without one, which finds none) took, still at the epoch it gave them (a later
# claim of a task overwrites its key); when there are any, nothing is claimed and they are answered again
# (``replayed``). Otherwise the picked tasks are claimed and carry the key and the request's fingerprint.
#
# The pick reads a queue's open tasks from ``ix_workflow_tasks_claim`` in claim order (the workflows started
# first: instance_created_at, then the task's created_at and id; migration 0025) and stops at ``:n`` it
# could lock: it visits the claimed tasks ahead of them and the tasks it takes, never the
# whole backlog (migration 0022: before, every open task of the namespace was read and sorted at every
# claim). The instance's hold is a correlated lookup per task visited (its primary key), never a scan of the
# instances. With several queues, each queue is read so (at most ``:n`` locked per queue) and the first
# ``:n`` of them in claim order are claimed; the others stay PENDING, locked until this statement's
# transaction ends.
_PICK_WHERE = """t.namespace_id = :ns AND t.state IN ('PENDING', 'CLAIMED')
      AND (t.state = 'PENDING' OR t.lease_expires_at <= now())
      AND t.deadline_at > now()
      -- W-CTL: a paused, cancelling or stopping instance grants no new execution, not even a task
      -- whose lease expired (the cancel's settlement decides it); L-PAUSE-3: compensation is not held
      AND (t.purpose = 'COMPENSATION'
           OR NOT (SELECT i.paused OR i.cancel_requested_at IS NOT NULL OR i.state = 'CANCELLING'
                   FROM workflow_instances i WHERE i.id = t.instance_id))
      AND NOT EXISTS (SELECT 1 FROM prior)"""
_PICK_ONE_QUEUE = f"""
    SELECT t.id FROM workflow_tasks t
    WHERE t.queue = :queue AND {_PICK_WHERE}
    ORDER BY t.instance_created_at, t.created_at, t.id
    LIMIT :n
    FOR UPDATE SKIP LOCKED"""
_PICK_QUEUES = f"""
    SELECT p.id FROM unnest(CAST(:queues AS text[])) AS q(queue)
    CROSS JOIN LATERAL (
        SELECT t.id, t.instance_created_at, t.created_at FROM workflow_tasks t
        WHERE t.queue = q.queue AND {_PICK_WHERE}
        ORDER BY t.instance_created_at, t.created_at, t.id
        LIMIT :n
        FOR UPDATE OF t SKIP LOCKED) p
    ORDER BY p.instance_created_at, p.created_at, p.id
    LIMIT :n"""


def _claim_sql(name: str, pick: str) -> Query:
    return query(
        name,
        f"""
WITH prior AS MATERIALIZED (
    SELECT {TASK_COLS}, t.claim_fingerprint FROM workflow_tasks t
    WHERE t.namespace_id = :ns AND t.claim_key = CAST(:key AS text)
),
picked AS ({pick}
),
claimed AS (
    UPDATE workflow_tasks t SET state = 'CLAIMED', epoch = t.epoch + 1, updated_at = now(),
        lease_expires_at = LEAST(now() + make_interval(secs => :lease), t.deadline_at),
        claim_key = CAST(:key AS text), claim_fingerprint = CAST(:fp AS text),
        worker = COALESCE(CAST(:worker AS jsonb), t.worker)
    FROM picked WHERE t.id = picked.id
    RETURNING {TASK_COLS}, t.claim_fingerprint
)
SELECT claimed.*, false AS replayed FROM claimed
UNION ALL
SELECT prior.*, true FROM prior
""",
    )


_CLAIM_ONE_QUEUE = _claim_sql("task_claim", _PICK_ONE_QUEUE)
_CLAIM_QUEUES = _claim_sql("task_claim_queues", _PICK_QUEUES)


def claim(
    conn: Connection,
    namespace_id: str,
    queues: list[str],
    n: int,
    lease_seconds: float,
    *,
    key: str | None = None,
    fingerprint: str | None = None,
    worker: str | None = None,
) -> list[Any]:
    """PENDING (or CLAIMED with an expired lease) -> CLAIMED, epoch + 1, oldest first; the claimed rows
    keep ``key`` and ``fingerprint`` (the request's Idempotency-Key and fingerprint) and ``worker`` (the
    claiming worker's identity as JSON text, issue 47; None keeps the row's earlier one). When tasks carry
    ``key`` already, nothing is claimed and those rows are returned (``replayed`` true, with the
    ``claim_fingerprint`` of the request that claimed them)."""
    names = sorted(set(queues))
    if not names:
        return []
    return list(
        run(
            conn,
            _CLAIM_ONE_QUEUE if len(names) == 1 else _CLAIM_QUEUES,
            {
                "ns": namespace_id,
                "queue": names[0] if len(names) == 1 else None,
                "queues": names,
                "n": n,
                "lease": lease_seconds,
                "key": key,
                "fp": fingerprint if key is not None else None,
                "worker": worker,
            },
        )
    )


_HEARTBEAT = query(
    "task_heartbeat",
    f"""
UPDATE workflow_tasks t SET lease_expires_at = LEAST(now() + make_interval(secs => :lease), t.deadline_at),
    updated_at = now()
WHERE t.id = :id AND t.epoch = :epoch AND t.state = 'CLAIMED' AND t.deadline_at > now()
  AND t.lease_expires_at > now()
RETURNING {TASK_COLS}
""",
)


def heartbeat(conn: Connection, task_id: str, epoch: int, lease_seconds: float) -> Any:
    """The lease of the current claim moves on (never past the task deadline); None when the claim
    is no longer current (fenced)."""
    return maybe(conn, _HEARTBEAT, {"id": task_id, "epoch": epoch, "lease": lease_seconds})


def complete(
    conn: Connection, task_id: str, epoch: int, output: Any, instance_id: str, key: str | None = None
) -> tuple[Any, list[dict]]:
    """CLAIMED (this epoch) -> COMPLETED; returns the row (``TASK_COLS``) as it now is, and the steps of its
    instance ``instance_id`` as ``row_access.read_steps`` reads them (in the same statement). ``key``: the
    Idempotency-Key of the request, kept as ``result_key``."""
    return _end_claim(conn, "task complete", task_id, epoch, S.COMPLETED, "output", output, instance_id, key)


def complete_closing_step(
    conn: Connection,
    task_id: str,
    epoch: int,
    output: Any,
    instance_id: str,
    activation_id: str,
    key: str | None = None,
) -> tuple[Any, list[dict], Any]:
    """``complete``, and in the same statement the task's step (activation ``activation_id``) with its
    activation open -> SUCCEEDED with ``output``, when it is the task's, open and no POLL's: the caller found
    that the completion then completes it (``decide.tasks.completes_with_its_step``). Returns the task's
    row, the steps as they were before (the step still open there), and the step's output as its row now
    holds it, MISSING when the step did not move (the caller's decision says why)."""
    written, steps = write_reading_steps(
        conn,
        _COMPLETE_CLOSING_STEP,
        {
            "id": task_id,
            "epoch": epoch,
            "s": S.COMPLETED,
            "v": jdump(output),
            "key": key,
            "a": activation_id,
            "step_open": _STEP_OPEN,
        },
        instance_id,
    )
    if written is None:
        raise TransitionRefused("task complete", task_id, [S.CLAIMED])
    row, (closed,) = split_rows([written], _CLOSED)
    _task_event(conn, "task.completed", row)
    return row, steps, MISSING if closed.step_id is None else jparse(closed.output)


def fail(
    conn: Connection, task_id: str, epoch: int, error: Any, instance_id: str, key: str | None = None
) -> tuple[Any, list[dict]]:
    """CLAIMED (this epoch) -> FAILED; returns the row (``TASK_COLS``) as it now is, and the steps of its
    instance (as ``complete``)."""
    return _end_claim(conn, "task fail", task_id, epoch, S.FAILED, "error", error, instance_id, key)


# The end of a claim, with its output (a completion) or its error (a failure); run as
# ``task_complete_reading_steps`` / ``task_fail_reading_steps`` (``row_access.write_reading_steps``).
_END_CLAIM = {
    "output": query(
        "task_complete",
        f"UPDATE workflow_tasks AS t SET state = :s, output = CAST(:v AS jsonb), "
        f"result_key = CAST(:key AS text), {_DONE} "
        f"WHERE id = :id AND epoch = :epoch AND state = 'CLAIMED' RETURNING {TASK_COLS}",
    ),
    "error": query(
        "task_fail",
        f"UPDATE workflow_tasks AS t SET state = :s, error = CAST(:v AS jsonb), "
        f"result_key = CAST(:key AS text), {_DONE} "
        f"WHERE id = :id AND epoch = :epoch AND state = 'CLAIMED' RETURNING {TASK_COLS}",
    ),
}
# each with the steps read in its snapshot (``row_access.write_reading_steps``)
_END_CLAIM_READING_STEPS = {column: reading_steps(write) for column, write in _END_CLAIM.items()}
# A completion that closes its step too (``complete_closing_step``: the caller found that the completion
# completes the step when the step is the task's: ``decide.tasks.completes_with_its_step``), written out as
# one statement: the claim's end (``m``, as ``task_complete``) and, only when it ended, the step of the
# task's activation, open and no POLL (the step row's part of ``decide.tasks.task_ended``'s rule), with its
# activation -> SUCCEEDED with the task's output (``c``: ``step_moves.succeed``'s move, revision + 1), then
# the instance's steps as they were (``row_access.reading_steps_after``). ``closed__step_id`` says whether
# the step moved.
# The output is kept once, on the activation: the step moves first (``c``, when the claim is still this
# epoch's: the task row, which the caller holds locked since its first statement, as ``m`` will find it), and
# the task keeps no output of its own when it did (``TASK_OUTPUT`` reads it from the activation), the output
# when it did not (the caller's decision refuses that and rolls back: it is never left so).
_STEP_OPEN = states(STEP_OPEN)
_CLAIM_ENDS = "id = :id AND epoch = :epoch AND state = 'CLAIMED'"
_COMPLETE_CLOSING_STEP = reading_steps_after(
    "task_complete_closing_step",
    "c AS (UPDATE workflow_steps SET state = 'SUCCEEDED', act_state = 'SUCCEEDED', completed_at = now(), "
    "act_output = CAST(:v AS jsonb), revision = revision + 1, updated_at = now() "
    "WHERE instance_id = :steps_of_instance AND activation_id = :a AND state = ANY(:step_open) "
    "AND act_state = ANY(:step_open) AND kind <> 'POLL' "
    f"AND EXISTS (SELECT 1 FROM workflow_tasks WHERE {_CLAIM_ENDS}) "
    "RETURNING id, act_output::text AS act_output), "
    "m AS (UPDATE workflow_tasks AS t SET state = :s, "
    "output = CASE WHEN EXISTS (SELECT 1 FROM c) THEN NULL ELSE CAST(:v AS jsonb) END, "
    f"result_key = CAST(:key AS text), {_DONE} WHERE {_CLAIM_ENDS} "
    f"RETURNING {task_cols('CAST(CAST(:v AS jsonb) AS text) AS output')})",
    "SELECT m.*, c.id AS closed__step_id, c.act_output AS closed__output FROM m LEFT JOIN c ON true",
)
_CLOSED = "closed__"


def _end_claim(
    conn: Connection,
    what: str,
    task_id: str,
    epoch: int,
    state: str,
    column: str,
    value: Any,
    instance_id: str,
    key: str | None,
) -> tuple[Any, list[dict]]:
    """The current claim ends in ``state`` with ``value`` in ``column`` (output or error), and the request's
    Idempotency-Key ``key`` in ``result_key``. The steps, which the caller reads next to settle the task's
    step, come back from the same statement: it moves no step, and the caller holds the instance's lock
    (``row_access.write_reading_steps``)."""
    row, steps = write_reading_steps(
        conn,
        _END_CLAIM_READING_STEPS[column],
        {"id": task_id, "epoch": epoch, "s": state, "v": jdump(value), "key": key},
        instance_id,
    )
    if row is None:
        raise TransitionRefused(what, task_id, [S.CLAIMED])
    _task_event(conn, f"task.{state.lower()}", row)
    return row, steps


_Q_TASK_TRY_TIME_OUT = query(
    "task_try_time_out",
    f"UPDATE workflow_tasks SET state = 'TIMED_OUT', error = CAST(:e AS jsonb), {_DONE} "
    f"WHERE id = :id AND instance_id = :inst AND state = ANY(:from) AND deadline_at <= now() {_EVENT_COLS}",
)


def try_time_out(conn: Connection, task_id: str, instance_id: str, error: Any) -> bool:
    """An open task of ``instance_id`` past its deadline -> TIMED_OUT (False: settled or not due)."""
    row = maybe(
        conn,
        _Q_TASK_TRY_TIME_OUT,
        {"id": task_id, "inst": instance_id, "e": jdump(error), "from": OPEN},
    )
    if row is None:
        return False
    _task_event(conn, "task.timed_out", row)
    return True


_Q_TASK_POSTPONE_DEADLINES = query(
    "task_postpone_deadlines",
    "UPDATE workflow_tasks SET deadline_at = deadline_at + CAST(:by AS interval), updated_at = now() "
    # its open tasks, by its instance's index (row_access._OPEN_WORK)
    f"WHERE instance_id = :i AND {task_open_sql()} "
    "AND CAST(:by AS interval) > interval '0'",
)


def postpone_deadlines(conn: Connection, instance_id: str, by: Any) -> None:
    """An instance resumed after a pause of ``by`` (an interval): its open tasks' deadlines move on by it
    (L-PAUSE-1: a suspended deadline keeps its remainder). No state changes."""
    run(
        conn,
        _Q_TASK_POSTPONE_DEADLINES,
        {"i": instance_id, "by": by},
    )


_Q_TASK_RETURN_EXPIRED = query(
    "task_return_expired",
    """
UPDATE workflow_tasks t SET state = 'PENDING', lease_expires_at = NULL, updated_at = now()
FROM (SELECT id FROM workflow_tasks w WHERE w.state = 'CLAIMED' AND w.lease_expires_at <= now()
        AND NOT EXISTS (SELECT 1 FROM workflow_instances i
                        WHERE i.id = w.instance_id AND i.cancel_requested_at IS NOT NULL)
      ORDER BY w.lease_expires_at, w.id LIMIT :n FOR UPDATE OF w SKIP LOCKED) picked
WHERE t.id = picked.id AND t.state = 'CLAIMED'
RETURNING t.id
""",
)


def return_expired(conn: Connection, limit: int) -> int:
    """The sweep: CLAIMED tasks whose lease passed -> PENDING (epoch kept; the next claim bumps it).
    SKIP LOCKED: a task being settled is left for the next pass; tasks of an instance with a cancel
    requested are left to the cancel's settlement (W-CTL-3: they must not be claimed again)."""
    return len(
        many(
            conn,
            _Q_TASK_RETURN_EXPIRED,
            {"n": limit},
        )
    )


# Open tasks -> CANCELLED, each filter its statement (the cancels the engine makes):
# (of, step_only, pending_only, expired_claims_only, unclaimed_or_expired) -> statement
_CANCEL_OPEN = {
    ("instance", False, False, False, False): query(
        "task_cancel_open",
        f"UPDATE workflow_tasks SET state = 'CANCELLED', {_DONE} WHERE state = ANY(:from) AND instance_id = :inst "
        f"{_EVENT_COLS}",
    ),
    ("instance", True, False, False, True): query(
        "task_cancel_unclaimed_or_expired_steps",
        f"UPDATE workflow_tasks SET state = 'CANCELLED', {_DONE} WHERE state = ANY(:from) AND instance_id = :inst "
        "AND purpose = 'STEP' AND (state = 'PENDING' OR (state = 'CLAIMED' AND lease_expires_at <= now())) "
        f"{_EVENT_COLS}",
    ),
    ("instance", True, False, True, False): query(
        "task_cancel_expired_step_claims",
        f"UPDATE workflow_tasks SET state = 'CANCELLED', {_DONE} WHERE state = ANY(:from) AND instance_id = :inst "
        f"AND purpose = 'STEP' AND state = 'CLAIMED' AND lease_expires_at <= now() {_EVENT_COLS}",
    ),
    ("activation", True, False, False, False): query(
        "task_cancel_open_of_activation",
        f"UPDATE workflow_tasks SET state = 'CANCELLED', {_DONE} WHERE state = ANY(:from) AND activation_id = :act "
        f"AND purpose = 'STEP' {_EVENT_COLS}",
    ),
    ("activation", False, True, False, False): query(
        "task_cancel_pending_of_activation",
        f"UPDATE workflow_tasks SET state = 'CANCELLED', {_DONE} WHERE state = ANY(:from) AND activation_id = :act "
        f"AND state = 'PENDING' {_EVENT_COLS}",
    ),
}


def cancel_open(
    conn: Connection,
    *,
    instance_id: str | None = None,
    activation_id: str | None = None,
    step_only: bool = False,
    pending_only: bool = False,
    expired_claims_only: bool = False,
    unclaimed_or_expired: bool = False,
) -> list[str]:
    """Open tasks of an instance or of one activation -> CANCELLED; returns their ids. Filters:
    ``step_only`` (not compensation tasks), ``pending_only`` (PENDING), ``expired_claims_only``
    (CLAIMED with a passed lease), ``unclaimed_or_expired`` (PENDING, or CLAIMED with a passed lease): the
    combinations of ``_CANCEL_OPEN``."""
    if instance_id is None and activation_id is None:
        raise ValueError("cancel_open needs an instance or an activation")
    of = "instance" if activation_id is None else "activation"
    statement = _CANCEL_OPEN[(of, step_only, pending_only, expired_claims_only, unclaimed_or_expired)]
    rows = many(conn, statement, {"inst": instance_id, "act": activation_id, "from": OPEN})
    for r in rows:
        _task_event(conn, "task.cancelled", r)
    return [r.id for r in rows]


# ------------------------------------------------------------------ fan-out element retries (issue 44)
_ELEMENT_RETRY_AT = query(
    "task_element_retry_at",
    "UPDATE workflow_tasks SET next_attempt_at = now() + make_interval(secs => :d) "
    "WHERE id = :t AND element IS NOT NULL AND state NOT IN ('PENDING', 'CLAIMED', 'COMPLETED') "
    "RETURNING next_attempt_at",
)
_ELEMENT_RETRY_ENDED = query(
    "task_element_retry_ended",
    "UPDATE workflow_tasks SET next_attempt_at = NULL "
    "WHERE id = :t AND activation_id = :a AND next_attempt_at IS NOT NULL RETURNING element",
)


def element_retry_at(conn: Connection, task_id: str, seconds: float) -> Any:
    """A fan-out element's failed task waits ``seconds`` for its next attempt (its step's retry backoff):
    the element counts as running until then. Returns when the next attempt is due (database time)."""
    return run(conn, _ELEMENT_RETRY_AT, {"t": task_id, "d": seconds}).scalar_one()


def element_retry_ended(conn: Connection, task_id: str, activation_id: str) -> int | None:
    """The backoff of element task ``task_id`` of activation ``activation_id`` passed: it waits no more.
    Returns the element's index (None: the task waits for no retry, e.g. a second wake)."""
    return run(conn, _ELEMENT_RETRY_ENDED, {"t": task_id, "a": activation_id}).scalar()
