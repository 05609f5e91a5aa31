"""Every write of ``workflow_steps.state`` and of its current activation (``act_state`` and the
activation's columns on the step row; ``workflow_activations`` holds only replaced activations). A step
and its current activation move together; each move is guarded by the states it may leave and bumps the step's
``revision``. Set moves (every open step of an instance) return the keys they moved."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from app.engine import events
from app.engine.row_access import MISSING, blocked_step, jdump, jparse
from app.engine.states import STEP_OPEN, StepState
from app.engine.transitions._guard import TransitionRefused, many, one, states
from app.engine.transitions.instance_moves import PROGRESS_FROM, PROGRESS_MOVE
from app.engine.transitions.task_moves import TASK_INSERT
from app.ids import new_id
from app.ledger.enqueue import JOB_INSERT_UNREAD
from app.sql import Query, query, run

S = StepState
OPEN = states(STEP_OPEN)
# operator recovery (X-RECOVER) may resolve these
RESOLVABLE = states([S.ACTIVE, S.WAITING, S.FAILED, S.CANCELLED, S.NEEDS_REVIEW])
_BUMP = "revision = revision + 1, updated_at = now()"


def blocked_all(iid: str, specs: list[dict]) -> dict[str, dict[str, Any]]:
    """The steps of a new instance: every declared step BLOCKED, which is not stored (a step's row is
    inserted when it is first activated: ``activate``). Writes nothing; returns the steps by key, as
    ``row_access.read_steps`` reads them."""
    return {
        st["key"]: blocked_step(iid, st["key"], st["kind"], st.get("after", []))
        for st in sorted(specs, key=lambda st: st["key"])
    }


@dataclass(frozen=True)
class NewActivation:
    """The next activation of a step, as ``activate`` writes it onto the step row."""

    id: str
    sequence: int
    input: Any
    task_attempts: int
    poll_deadline: Any


@dataclass
class Activation:
    """The rows a step's activation writes beside the step's own: its task (``task_moves.insert``) and
    its jobs (a TIMER's wake, a SUBWORKFLOW's spawn, a new instance's watch: ``app.ledger.enqueue``), each a
    dict of the parameters of ``task_insert`` / ``job_insert_unread``. A first activation writes them
    with the step's row, in ONE statement (``step_activate_first``)."""

    tasks: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)


# the current activation of a step, copied to workflow_activations before a new one replaces it
_ARCHIVE = """
INSERT INTO workflow_activations (id, instance_id, step_id, sequence, state, input, output, error, task_attempts,
    child_instance_id, poll_used_rounds, poll_first_round, poll_first_round_attempts_used, poll_round_attempts,
    poll_deadline_at, poll_last_task_id, poll_current_task_id, poll_next_at, poll_resolved_at, activated_at,
    completed_at)
SELECT activation_id, instance_id, id, activation_sequence, act_state, act_input, act_output, act_error,
    COALESCE(task_attempts, 0), child_instance_id, poll_used_rounds, poll_first_round,
    poll_first_round_attempts_used, poll_round_attempts, poll_deadline_at, poll_last_task_id,
    poll_current_task_id, poll_next_at, poll_resolved_at, COALESCE(activated_at, now()), completed_at
FROM workflow_steps WHERE id = :step AND activation_id = :a
"""
STEP_ARCHIVE_ACTIVATION = query("step_archive_activation", _ARCHIVE)


def insert_activation(
    conn: Connection,
    step: dict,
    act_input: Any,
    *,
    task_attempts: int = 0,
    poll_deadline: Any = None,
) -> NewActivation:
    """The next activation (sequence + 1) of ``step``: its id now (its task or wait names it), its row
    is the step's own once ``activate`` ran. A step that already had an activation (an operator's
    RETRY_STEP) first copies that one to ``workflow_activations``: the only write an activation costs
    beyond its step's."""
    if step["activation_id"] is not None:
        run(conn, STEP_ARCHIVE_ACTIVATION, {"step": step["id"], "a": step["activation_id"]})
    return NewActivation(
        id=new_id(),
        sequence=(step["activation_sequence"] or 0) + 1,
        input=act_input,
        task_attempts=task_attempts,
        poll_deadline=poll_deadline,
    )


# The first activation of a BLOCKED step, which has no row: its tasks (``Activation.tasks``: 0..n rows as JSON
# records), then its row, inserted ACTIVE / WAITING (revision 2, as when the BLOCKED row of revision 1 was
# updated). A row already there (another transaction activated the step first) refuses the move, as a step
# no longer BLOCKED did (the task then goes with the transaction's rollback). The task's key to its step is
# checked at commit (DEFERRABLE INITIALLY DEFERRED); the writes of one statement read nothing the others
# write. A TASK step's next activation is this statement with one task.
_TASKS = """task AS (
    INSERT INTO workflow_tasks (id, namespace_id, instance_id, step_id, step_key, activation_id, queue, input,
        attempt, poll_round, deadline_at, purpose, instance_created_at)
    SELECT t.id, t.ns, t.inst, t.step, t.key, t.act, t.queue, CAST(t.input AS jsonb), t.attempt, t.round,
        now() + make_interval(secs => t.timeout), t.purpose, t.instance_created_at
    FROM json_to_recordset(CAST(:tasks AS json)) AS t(id text, ns text, inst text, step text, key text,
        act text, queue text, input text, attempt int, round int, timeout float8, purpose text,
        instance_created_at timestamptz))"""
# the activation's jobs (``Activation.jobs``: a TIMER's wake, a SUBWORKFLOW's spawn, a TRIGGER's dispatch, an
# external approval's dispatch, a new instance's watch; 1..n rows as JSON records; a job whose idempotency
# key exists is left as it is)
_JOBS = """job AS (
    INSERT INTO workflow_jobs (type, queue, payload, instance_id, task_id, step_key, priority, run_at,
        max_attempts, execution_timeout_ms, operation_key, idempotency_key, trace_id, traceparent)
    SELECT CAST(j.type AS workflow_job_type), CAST(j.queue AS workflow_job_queue), CAST(j.payload AS jsonb),
        j.instance_id, j.task_id, j.step_key, j.priority,
        COALESCE(j.run_at, now() + j.delay_ms * interval '1 millisecond'),
        j.max_attempts, j.execution_timeout_ms, j.operation_key, j.idempotency_key, j.trace_id, j.traceparent
    FROM json_to_recordset(CAST(:jobs AS json)) AS j(type text, queue text, payload text, instance_id text,
        task_id text, step_key text, priority int, run_at timestamptz, delay_ms float8, max_attempts int,
        execution_timeout_ms bigint, operation_key text, idempotency_key text, trace_id text, traceparent text)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING)"""
_STEP_ROW = """INSERT INTO workflow_steps (id, instance_id, key, kind, state, revision, after, activation_id,
    activation_sequence, task_id, act_state, act_input, act_output, act_error, task_attempts, child_instance_id,
    poll_used_rounds, poll_first_round, poll_first_round_attempts_used, poll_round_attempts, poll_deadline_at,
    poll_last_task_id, poll_current_task_id, poll_next_at, poll_resolved_at, activated_at, completed_at)
VALUES (:id, :inst, :key, :kind, :s, 2, :after, :a, :seq, :t, :s, CAST(:input AS jsonb), NULL, NULL,
    :attempts, NULL, :z, :one, :z, :z, :pd, NULL, NULL, NULL, NULL, now(), NULL)
ON CONFLICT (instance_id, key) DO NOTHING RETURNING instance_id"""
STEP_ACTIVATE_FIRST = query("step_activate_first", f"WITH {_TASKS}\n{_STEP_ROW}")
STEP_ACTIVATE_FIRST_WITH_JOBS = query(
    "step_activate_first_with_jobs", f"WITH {_TASKS},\n{_JOBS}\n{_STEP_ROW}"
)
# The same with the instance's RUNNING <-> WAITING move that follows the activation (``activate``'s
# ``progress``: its caller decided it from the steps as the activation leaves them), written as
# ``instance_moves.set_progress`` writes it (``p``: revision + 1, guarded by the advancing states): one
# statement instead of two. No row: the step's row was there (refused); a row of NULLs: the instance's guard
# refused its move.
_AND_PROGRESS = f"p AS ({PROGRESS_MOVE}),\nst AS ({_STEP_ROW})\nSELECT p.* FROM st LEFT JOIN p ON true"
STEP_ACTIVATE_FIRST_PROGRESS = query("step_activate_first_progress", f"WITH {_TASKS},\n{_AND_PROGRESS}")
STEP_ACTIVATE_FIRST_WITH_JOBS_PROGRESS = query(
    "step_activate_first_with_jobs_progress", f"WITH {_TASKS},\n{_JOBS},\n{_AND_PROGRESS}"
)
STEP_ACTIVATE_AGAIN = query(
    "step_activate_again",
    f"""
UPDATE workflow_steps SET state = :s, activation_id = :a, activation_sequence = :seq,
    task_id = COALESCE(:t, CASE WHEN kind = 'POLL' THEN task_id END),
    act_state = :s, act_input = CAST(:input AS jsonb), act_output = NULL, act_error = NULL,
    task_attempts = :attempts, child_instance_id = NULL, poll_used_rounds = :z, poll_first_round = :one,
    poll_first_round_attempts_used = :z, poll_round_attempts = :z, poll_deadline_at = :pd,
    poll_last_task_id = NULL, poll_current_task_id = NULL, poll_next_at = NULL, poll_resolved_at = NULL,
    activated_at = now(), completed_at = NULL, {_BUMP}
WHERE id = :id AND state = ANY(:from) RETURNING instance_id
""",
)


def _rows(work: Activation) -> dict[str, str]:
    """``work``'s rows as the parameters of ``step_activate_first`` (``_with_jobs``)."""
    rows = {"tasks": json.dumps(work.tasks, default=str)}
    if work.jobs:
        rows["jobs"] = json.dumps(work.jobs, default=str)
    return rows


def activate(
    conn: Connection,
    iid: str,
    step: dict,
    state: str,
    act: NewActivation,
    *,
    task_id: str | None = None,
    allowed: list[str] | None = None,
    work: Activation | None = None,
    progress: str | None = None,
) -> Any:
    """Step ``step`` of instance ``iid`` runs activation ``act`` (in ``state``, ACTIVE / WAITING): from BLOCKED (dependencies
    succeeded: the step's row is inserted, with ``work``'s rows, in one statement) or, for an operator's
    RETRY_STEP, from ``RESOLVABLE`` (``work``'s rows are inserted, then its row is updated).

    ``progress``: the instance's next state (RUNNING / WAITING) when its caller decided that this
    activation is followed by that move (``driver.make_progress``): a first activation then writes it in
    its own statement (``step_activate_first_progress``) and returns the instance's row as moved, for
    ``instance_moves.progressed``; otherwise None."""
    allowed = allowed or [S.BLOCKED]
    # no row yet: the first activation inserts it. A stored row (an operator's RETRY_STEP, or a BLOCKED
    # row an older release inserted at its start) is updated, guarded by ``allowed`` as ever.
    first = step.get("stored") is False
    what = f"step {step['key']} -> {state}"
    if first and S.BLOCKED not in allowed:
        raise TransitionRefused(what, step["id"], states(allowed))
    if progress is not None and not first:
        raise ValueError("only a first activation writes the instance's progress with its row")
    poll = act.poll_deadline is not None
    work = work or Activation()
    if not first:
        for task in work.tasks:
            run(conn, TASK_INSERT, task)
        for job in work.jobs:
            run(conn, JOB_INSERT_UNREAD, job)
    params = {
        "id": step["id"],
        "inst": iid,
        "key": step["key"],
        "kind": step["kind"],
        "after": list(step["after"]),
        "s": state,
        "a": act.id,
        "seq": act.sequence,
        "t": task_id,
        "from": states(allowed),
        "input": jdump(act.input),
        "attempts": act.task_attempts,
        "z": 0 if poll else None,
        "one": 1 if poll else None,
        "pd": act.poll_deadline,
        **(_rows(work) if first else {}),
    }
    moved = None
    if progress is None:
        if not first:
            statement = STEP_ACTIVATE_AGAIN
        else:
            statement = STEP_ACTIVATE_FIRST_WITH_JOBS if work.jobs else STEP_ACTIVATE_FIRST
        one(conn, what, step["id"], allowed, statement, params)
    else:
        statement = STEP_ACTIVATE_FIRST_WITH_JOBS_PROGRESS if work.jobs else STEP_ACTIVATE_FIRST_PROGRESS
        params.update(progress=progress, progress_from=PROGRESS_FROM)
        moved = one(conn, what, step["id"], allowed, statement, params)
        if moved.id is None:  # the instance's guard refused its move (the step's row goes with the rollback)
            raise TransitionRefused(f"instance -> {progress}", iid, PROGRESS_FROM)
    events.emit(
        conn,
        iid,
        "step.activated",
        step_key=step["key"],
        activation_id=act.id,
        sequence=act.sequence,
        state=state,
    )
    return moved


_SET_ACTIVE = query(
    "step_set_active",
    f"UPDATE workflow_steps SET state = 'ACTIVE', task_id = :t, {_BUMP} WHERE id = :id AND state = ANY(:from) "
    "RETURNING instance_id, activation_id",
)
_SET_WAITING = query(
    "step_set_waiting",
    f"UPDATE workflow_steps SET state = 'WAITING', {_BUMP} WHERE id = :id AND state = ANY(:from) "
    "RETURNING instance_id, activation_id",
)


# A step the skip rule decides not to run (``decide/progress.py``): its row is inserted SKIPPED (revision 2,
# as an activation's first row), with no activation and the reason in ``act_error`` (``{code, message}``,
# shown as the step's ``skipped``). A row already there refuses the move, as for ``_ACTIVATE_FIRST``.
_SKIP_FIRST = query(
    "step_skip_first",
    """
INSERT INTO workflow_steps (id, instance_id, key, kind, state, revision, after, act_error, completed_at)
VALUES (:id, :inst, :key, :kind, 'SKIPPED', 2, :after, CAST(:why AS jsonb), now())
ON CONFLICT (instance_id, key) DO NOTHING RETURNING instance_id
""",
)
# the same for a BLOCKED row an older release inserted at its instance's start
_SKIP_STORED = query(
    "step_skip_stored",
    f"""
UPDATE workflow_steps SET state = 'SKIPPED', act_error = CAST(:why AS jsonb), completed_at = now(), {_BUMP}
WHERE id = :id AND state = 'BLOCKED' RETURNING instance_id
""",
)


def skip(conn: Connection, iid: str, step: dict, code: str, message: str) -> None:
    """BLOCKED -> SKIPPED: the step will not run (``code`` CONDITION_FALSE / DEPENDENCIES_SKIPPED)."""
    first = step.get("stored") is False
    one(
        conn,
        f"step {step['key']} -> SKIPPED",
        step["id"],
        [S.BLOCKED],
        _SKIP_FIRST if first else _SKIP_STORED,
        {
            "id": step["id"],
            "inst": iid,
            "key": step["key"],
            "kind": step["kind"],
            "after": list(step["after"]),
            "why": jdump({"code": code, "message": message}),
        },
    )
    events.emit(conn, iid, "step.skipped", step_key=step["key"], reason=code)


def set_active(conn: Connection, step: dict, task_id: str) -> None:
    """The next task attempt / poll round runs: ACTIVE and pointing at its task."""
    row = one(
        conn,
        f"step {step['key']} -> ACTIVE",
        step["id"],
        OPEN,
        _SET_ACTIVE,
        {"id": step["id"], "t": task_id, "from": OPEN},
    )
    events.emit(
        conn,
        row.instance_id,
        "step.active",
        step_key=step["key"],
        activation_id=row.activation_id,
        task_id=task_id,
    )


def set_waiting(conn: Connection, step: dict) -> None:
    """Between attempts (retry backoff) or rounds (poll interval)."""
    row = one(
        conn,
        f"step {step['key']} -> WAITING",
        step["id"],
        OPEN,
        _SET_WAITING,
        {"id": step["id"], "from": OPEN},
    )
    events.emit(conn, row.instance_id, "step.waiting", step_key=step["key"], activation_id=row.activation_id)


_CLOSE = f"""
UPDATE workflow_steps SET state = :s, act_state = :s, completed_at = now(),
    act_output = COALESCE(CAST(:o AS jsonb), act_output), act_error = COALESCE(CAST(:e AS jsonb), act_error),
    {_BUMP}
WHERE id = :id AND activation_id = :a AND state = ANY(:from) AND act_state = ANY(:from)
RETURNING instance_id, act_output::text AS act_output
"""
STEP_CLOSE = query("step_close", _CLOSE)


def _close(conn: Connection, step: dict, state: str, allowed: list[str], *, output: Any, error: Any) -> Any:
    """The step and its current activation leave ``allowed`` for ``state``, together (one row): when
    either may not move, neither does. Returns the activation's output as stored (``jsonb``: its numbers
    and key order are PostgreSQL's, as any later read sees them; MISSING when none)."""
    row = one(
        conn,
        f"step {step['key']} and its activation -> {state}",
        step["id"],
        allowed,
        STEP_CLOSE,
        {
            "id": step["id"],
            "a": step["activation_id"],
            "s": state,
            "from": allowed,
            "o": jdump(output),
            "e": jdump(error),
        },
    )
    closed(conn, row.instance_id, step, state)
    return jparse(row.act_output)


def closed(conn: Connection, instance_id: str, step: dict, state: str) -> None:
    """The event of a step and its current activation closed in ``state`` (by ``_close``, or after a move of
    another table that closed the step in its own statement: ``wait_moves.try_fire_due``,
    ``task_moves.complete_closing_step``)."""
    events.emit(
        conn,
        instance_id,
        f"step.{state.lower()}",
        step_key=step["key"],
        activation_id=step["activation_id"],
    )


def succeed(conn: Connection, step: dict, output: Any) -> Any:
    """The current activation succeeded with ``output`` (MISSING = no output). Returns the output as
    stored (``_close``): what the step's row holds now, for the successors' mappings."""
    return _close(conn, step, S.SUCCEEDED, OPEN, output=output, error=MISSING)


def fail(conn: Connection, step: dict, error: Any) -> None:
    _close(conn, step, S.FAILED, OPEN, output=MISSING, error=error)


def cancel(conn: Connection, step: dict) -> None:
    _close(conn, step, S.CANCELLED, OPEN, output=MISSING, error=MISSING)


def close(conn: Connection, step: dict, state: str, *, output: Any = MISSING, error: Any = MISSING) -> None:
    """Operator recovery: SUCCEED_STEP / FAIL_STEP from any resolvable state."""
    _close(conn, step, state, RESOLVABLE, output=output, error=error)


_Q_STEP_END_ACTIVATION_FOR_RETRY = query(
    "step_end_activation_for_retry",
    "UPDATE workflow_steps SET act_state = CASE WHEN act_state IN ('SUCCEEDED', 'FAILED') THEN act_state "
    "ELSE 'CANCELLED' END, completed_at = COALESCE(completed_at, now()) WHERE id = :id AND activation_id = :a",
)


def end_activation_for_retry(conn: Connection, step: dict) -> None:
    """Operator RETRY_STEP: the current activation ends (CANCELLED unless it already settled)."""
    run(
        conn,
        _Q_STEP_END_ACTIVATION_FOR_RETRY,
        {"id": step["id"], "a": step["activation_id"]},
    )


# Every ACTIVE / WAITING step of an instance (and its activation, when that is still open) -> ``:s``,
# returning (key, activation id) of each step moved: all of them, those with no in-flight STEP task (a
# claimed task keeps its permit during a cancel), or the ``:keys`` whose external outcome is unknown (their
# activations stay open, unfinished: no completed_at).
_CANCEL_OPEN = query(
    "step_cancel_open",
    """UPDATE workflow_steps s SET state = :s, revision = s.revision + 1, updated_at = now(),
    act_state = CASE WHEN s.act_state = ANY(:from) THEN :s ELSE s.act_state END,
    completed_at = CASE WHEN s.act_state = ANY(:from) THEN now() ELSE s.completed_at END
WHERE s.instance_id = :id AND s.state = ANY(:from) RETURNING s.key, s.activation_id""",
)
_CANCEL_OPEN_IDLE = query(
    "step_cancel_open_idle",
    """UPDATE workflow_steps s SET state = :s, revision = s.revision + 1, updated_at = now(),
    act_state = CASE WHEN s.act_state = ANY(:from) THEN :s ELSE s.act_state END,
    completed_at = CASE WHEN s.act_state = ANY(:from) THEN now() ELSE s.completed_at END
WHERE s.instance_id = :id AND s.state = ANY(:from)
  AND NOT EXISTS (SELECT 1 FROM workflow_tasks t WHERE t.activation_id = s.activation_id
                  AND t.purpose = 'STEP' AND t.state = 'CLAIMED' AND t.lease_expires_at > now())
RETURNING s.key, s.activation_id""",
)
_TO_REVIEW = query(
    "step_to_review",
    """UPDATE workflow_steps s SET state = :s, revision = s.revision + 1, updated_at = now(),
    act_state = CASE WHEN s.act_state = ANY(:from) THEN :s ELSE s.act_state END, completed_at = s.completed_at
WHERE s.instance_id = :id AND s.state = ANY(:from) AND s.key = ANY(:keys) RETURNING s.key, s.activation_id""",
)


def _move_open(
    conn: Connection, statement: Query, iid: str, state: str, **params: Any
) -> list[tuple[str, str | None]]:
    """``statement`` (one of the three above) for instance ``iid``, to ``state``."""
    rows = many(conn, statement, {"id": iid, "s": state, "from": OPEN, **params})
    return [(r.key, r.activation_id) for r in rows]


def cancel_open(conn: Connection, iid: str, *, idle_only: bool = False) -> list[str]:
    """Every ACTIVE / WAITING step of the instance (and its activation) -> CANCELLED. ``idle_only``:
    only those with no in-flight STEP task (a claimed task keeps its permit during a cancel)."""
    moved = _move_open(conn, _CANCEL_OPEN_IDLE if idle_only else _CANCEL_OPEN, iid, S.CANCELLED)
    for key, act in moved:
        events.emit(conn, iid, "step.cancelled", step_key=key, activation_id=act)
    return [k for k, _ in moved]


def to_review(conn: Connection, iid: str, keys: list[str]) -> list[str]:
    """Steps whose external outcome is unknown -> NEEDS_REVIEW (with their activations)."""
    moved = _move_open(conn, _TO_REVIEW, iid, S.NEEDS_REVIEW, keys=keys)
    for key, act in moved:
        events.emit(conn, iid, "step.needs_review", step_key=key, activation_id=act)
    return [k for k, _ in moved]


# ------------------------------------------------------------------ POLL bookkeeping (W-STEP-3)
_Q_STEP_ACTIVATION_INPUT_OF = query(
    "step_activation_input_of",
    "SELECT act_input::text FROM workflow_steps WHERE activation_id = :id",
)


def activation_input_of(conn: Connection, act_id: str) -> Any:
    return jparse(run(conn, _Q_STEP_ACTIVATION_INPUT_OF, {"id": act_id}).scalar_one())


_Q_STEP_POLL_ROUND_STARTED = query(
    "step_poll_round_started",
    """
UPDATE workflow_steps SET poll_round_attempts = :att, poll_current_task_id = :task,
    poll_last_task_id = :task, poll_next_at = NULL,
    poll_first_round_attempts_used = CASE WHEN :rnd = poll_first_round THEN :att
                                          ELSE poll_first_round_attempts_used END
WHERE activation_id = :id
""",
)


def poll_round_started(conn: Connection, act_id: str, rnd: int, attempts: int, task_id: str) -> None:
    run(
        conn,
        _Q_STEP_POLL_ROUND_STARTED,
        {"id": act_id, "att": attempts, "task": task_id, "rnd": rnd},
    )


_POLL_TASK_ENDED = query(
    "step_poll_task_ended", "UPDATE workflow_steps SET poll_current_task_id = NULL WHERE activation_id = :id"
)
_POLL_RESOLVED = query(
    "step_poll_round_resolved",
    "UPDATE workflow_steps SET poll_current_task_id = NULL, poll_used_rounds = poll_used_rounds + 1, "
    "poll_round_attempts = 0, poll_resolved_at = now() WHERE activation_id = :id",
)
_POLL_USED_UP = query(
    "step_poll_rounds_used",
    "UPDATE workflow_steps SET poll_current_task_id = NULL, poll_used_rounds = :u, poll_round_attempts = 0 "
    "WHERE activation_id = :id",
)


def poll_task_ended(
    conn: Connection, act_id: str, *, resolved: bool = False, used: int | None = None
) -> None:
    """The round's task ended: ``resolved`` (done: the round counts as used), or the round is used up
    (``used`` rounds), or neither (another attempt of the same round follows)."""
    statement = _POLL_RESOLVED if resolved else _POLL_USED_UP if used is not None else _POLL_TASK_ENDED
    run(conn, statement, {"id": act_id, "u": used})


_Q_STEP_POLL_RESOLVED_BY_SIGNAL = query(
    "step_poll_resolved_by_signal",
    "UPDATE workflow_steps SET poll_resolved_at = now(), poll_next_at = NULL, "
    "poll_current_task_id = NULL WHERE activation_id = :a",
)


def poll_resolved_by_signal(conn: Connection, act_id: str) -> None:
    run(
        conn,
        _Q_STEP_POLL_RESOLVED_BY_SIGNAL,
        {"a": act_id},
    )


_Q_STEP_POLL_SCHEDULE = query(
    "step_poll_schedule",
    "UPDATE workflow_steps SET poll_next_at = now() + make_interval(secs => :s) WHERE activation_id = :id "
    "RETURNING poll_next_at",
)


def poll_schedule(conn: Connection, act_id: str, seconds: float) -> Any:
    """The next round is due ``seconds`` from now; returns that time."""
    return run(
        conn,
        _Q_STEP_POLL_SCHEDULE,
        {"id": act_id, "s": seconds},
    ).scalar_one()


_SET_TASK_ATTEMPTS = query(
    "step_set_task_attempts", "UPDATE workflow_steps SET task_attempts = :n WHERE activation_id = :id"
)


def set_task_attempts(conn: Connection, act_id: str, attempts: int) -> None:
    run(conn, _SET_TASK_ATTEMPTS, {"id": act_id, "n": attempts})


_Q_STEP_SET_CHILD = query(
    "step_set_child",
    f"UPDATE workflow_steps SET child_instance_id = :c, {_BUMP} WHERE id = :id AND activation_id = :a "
    "AND state = ANY(:from) RETURNING id",
)


def set_child(conn: Connection, step: dict, child_id: str) -> None:
    """A SUBWORKFLOW activation records its child (a new step revision; the instance's follows)."""
    one(
        conn,
        f"step {step['key']} child",
        step["id"],
        OPEN,
        _Q_STEP_SET_CHILD,
        {"id": step["id"], "a": step["activation_id"], "c": child_id, "from": OPEN},
    )


# a rerun's copied steps (``app.engine.rerun``): inserted SUCCEEDED with the old run's activation input and
# output (and its child), never activated here; ``copied_from`` names the old instance. ``after`` is the new
# version's, as a comma-separated list (a step key has no comma: ``documents.KEY_RE``).
_COPY = query(
    "step_copy_succeeded",
    """
INSERT INTO workflow_steps (id, instance_id, key, kind, state, revision, after, activation_id, activation_sequence,
    task_id, act_state, act_input, act_output, act_error, task_attempts, child_instance_id, poll_used_rounds,
    poll_first_round, poll_first_round_attempts_used, poll_round_attempts, poll_deadline_at, poll_last_task_id,
    poll_current_task_id, poll_next_at, poll_resolved_at, activated_at, completed_at, copied_from)
SELECT c.id, :inst, o.key, o.kind, 'SUCCEEDED', 2, COALESCE(string_to_array(NULLIF(c.after_csv, ''), ','), '{}'),
    c.act, 1, NULL, 'SUCCEEDED', o.act_input, o.act_output, NULL, 0, o.child_instance_id,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, now(), now(), o.instance_id
FROM unnest(CAST(:ids AS text[]), CAST(:keys AS text[]), CAST(:acts AS text[]), CAST(:afters AS text[]))
    AS c(id, key, act, after_csv)
    JOIN workflow_steps o ON o.instance_id = :old AND o.key = c.key AND o.state = 'SUCCEEDED'
RETURNING key, activation_id
""",
)


def copy_succeeded(conn: Connection, iid: str, old_iid: str, steps: list[dict]) -> None:
    """A rerun's copied steps (``steps``: BLOCKED rows of the new instance ``iid``, as ``blocked_all`` made
    them) inserted SUCCEEDED with the outputs of the same steps of ``old_iid``, each with its event."""
    if not steps:
        return
    rows = many(
        conn,
        _COPY,
        {
            "inst": iid,
            "old": old_iid,
            "ids": [s["id"] for s in steps],
            "keys": [s["key"] for s in steps],
            "acts": [new_id() for _ in steps],
            "afters": [",".join(s["after"]) for s in steps],
        },
    )
    if len(rows) != len(steps):
        raise TransitionRefused("rerun copy", iid, [S.SUCCEEDED])
    for r in rows:
        events.emit(
            conn, iid, "step.succeeded", step_key=r.key, activation_id=r.activation_id, copied_from=old_iid
        )
