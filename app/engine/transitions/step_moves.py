"""Every write of ``workflow_steps.state`` and of its current activation (``act_state`` and the
activation's columns on the step row; ``workflow_activations`` holds only replaced activations). A step
and its current activation move together; each move is guarded by the states it may leave and bumps the step's
``revision``. Set moves (every open step of an instance) return the keys they moved."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from app.engine import events
from app.engine.states import STEP_OPEN, StepState
from app.engine.store import MISSING, blocked_step, jdump, jparse
from app.engine.transitions._guard import TransitionRefused, many, one, states
from app.ids import new_id
from app.sql import defer, run

S = StepState
OPEN = states(STEP_OPEN)
# operator recovery (X-RECOVER) may resolve these
RESOLVABLE = states([S.ACTIVE, S.WAITING, S.FAILED, S.CANCELLED, S.NEEDS_REVIEW])
_BUMP = "revision = revision + 1, updated_at = now()"


def blocked_all(iid: str, specs: list[dict]) -> dict[str, dict[str, Any]]:
    """The steps of a new instance: every declared step BLOCKED, which is not stored (a step's row is
    inserted when it is first activated: ``activate``). Writes nothing; returns the steps by key, as
    ``store.read_steps`` reads them."""
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
        defer(conn, _ARCHIVE, {"step": step["id"], "a": step["activation_id"]})
    return NewActivation(
        id=new_id(),
        sequence=(step["activation_sequence"] or 0) + 1,
        input=act_input,
        task_attempts=task_attempts,
        poll_deadline=poll_deadline,
    )


_ACT_COLUMNS = """activation_id, activation_sequence, task_id, act_state, act_input, act_output, act_error,
    task_attempts, child_instance_id, poll_used_rounds, poll_first_round, poll_first_round_attempts_used,
    poll_round_attempts, poll_deadline_at, poll_last_task_id, poll_current_task_id, poll_next_at,
    poll_resolved_at, activated_at, completed_at"""
# the first activation of a BLOCKED step, which has no row: its row, inserted ACTIVE / WAITING (revision 2,
# as when the BLOCKED row of revision 1 was updated). A row already there (another transaction activated
# the step first) refuses the move, as a step no longer BLOCKED did.
_ACTIVATE_FIRST = f"""
INSERT INTO workflow_steps (id, instance_id, key, kind, state, revision, after, {_ACT_COLUMNS})
VALUES (:id, :inst, :key, :kind, :s, 2, :after, :a, :seq, :t, :s, CAST(:input AS jsonb), NULL, NULL,
    :attempts, NULL, :z, :one, :z, :z, :pd, NULL, NULL, NULL, NULL, now(), NULL)
ON CONFLICT (instance_id, key) DO NOTHING RETURNING instance_id
"""
# a new activation of a stored step (an operator's RETRY_STEP)
_ACTIVATE_AGAIN = f"""
UPDATE workflow_steps SET state = :s, activation_id = :a, activation_sequence = :seq,
    task_id = COALESCE(:t, CASE WHEN kind = 'POLL' THEN task_id END),
    act_state = :s, act_input = CAST(:input AS jsonb), act_output = NULL, act_error = NULL,
    task_attempts = :attempts, child_instance_id = NULL, poll_used_rounds = :z, poll_first_round = :one,
    poll_first_round_attempts_used = :z, poll_round_attempts = :z, poll_deadline_at = :pd,
    poll_last_task_id = NULL, poll_current_task_id = NULL, poll_next_at = NULL, poll_resolved_at = NULL,
    activated_at = now(), completed_at = NULL, {_BUMP}
WHERE id = :id AND state = ANY(:from) RETURNING instance_id
"""


def activate(
    conn: Connection,
    iid: str,
    step: dict,
    state: str,
    act: NewActivation,
    *,
    task_id: str | None = None,
    allowed: list[str] | None = None,
) -> None:
    """Step ``step`` of instance ``iid`` runs activation ``act`` (in ``state``, ACTIVE / WAITING): from BLOCKED (dependencies
    succeeded: the step's row is inserted) or, for an operator's RETRY_STEP, from ``RESOLVABLE`` (its
    row is updated)."""
    allowed = allowed or [S.BLOCKED]
    # no row yet: the first activation inserts it. A stored row (an operator's RETRY_STEP, or a BLOCKED
    # row an older release inserted at its start) is updated, guarded by ``allowed`` as ever.
    first = step.get("stored") is False
    if first and S.BLOCKED not in allowed:
        raise TransitionRefused(f"step {step['key']} -> {state}", step["id"], states(allowed))
    poll = act.poll_deadline is not None
    row = one(
        conn,
        f"step {step['key']} -> {state}",
        step["id"],
        allowed,
        _ACTIVATE_FIRST if first else _ACTIVATE_AGAIN,
        {
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
        },
    )
    events.emit(
        conn,
        row.instance_id,
        "step.activated",
        step_key=step["key"],
        activation_id=act.id,
        sequence=act.sequence,
        state=state,
    )


# A step the skip rule decides not to run (``decide/progress.py``): its row is inserted SKIPPED (revision 2,
# as an activation's first row), with no activation and the reason in ``act_error`` (``{code, message}``,
# shown as the step's ``skipped``). A row already there refuses the move, as for ``_ACTIVATE_FIRST``.
_SKIP_FIRST = """
INSERT INTO workflow_steps (id, instance_id, key, kind, state, revision, after, act_error, completed_at)
VALUES (:id, :inst, :key, :kind, 'SKIPPED', 2, :after, CAST(:why AS jsonb), now())
ON CONFLICT (instance_id, key) DO NOTHING RETURNING instance_id
"""
# the same for a BLOCKED row an older release inserted at its instance's start
_SKIP_STORED = f"""
UPDATE workflow_steps SET state = 'SKIPPED', act_error = CAST(:why AS jsonb), completed_at = now(), {_BUMP}
WHERE id = :id AND state = 'BLOCKED' RETURNING instance_id
"""


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
        f"UPDATE workflow_steps SET state = 'ACTIVE', task_id = :t, {_BUMP} WHERE id = :id AND state = ANY(:from) "
        "RETURNING instance_id, activation_id",
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
        f"UPDATE workflow_steps SET state = 'WAITING', {_BUMP} WHERE id = :id AND state = ANY(:from) "
        "RETURNING instance_id, activation_id",
        {"id": step["id"], "from": OPEN},
    )
    events.emit(conn, row.instance_id, "step.waiting", step_key=step["key"], activation_id=row.activation_id)


_SETTLE = f"""
UPDATE workflow_steps SET state = :s, act_state = :s, completed_at = now(),
    act_output = COALESCE(CAST(:o AS jsonb), act_output), act_error = COALESCE(CAST(:e AS jsonb), act_error),
    {_BUMP}
WHERE id = :id AND activation_id = :a AND state = ANY(:from) AND act_state = ANY(:from) RETURNING instance_id
"""


def _settle(conn: Connection, step: dict, state: str, allowed: list[str], *, output: Any, error: Any) -> None:
    """The step and its current activation leave ``allowed`` for ``state``, together (one row): when
    either may not move, neither does."""
    row = one(
        conn,
        f"step {step['key']} and its activation -> {state}",
        step["id"],
        allowed,
        _SETTLE,
        {
            "id": step["id"],
            "a": step["activation_id"],
            "s": state,
            "from": allowed,
            "o": jdump(output),
            "e": jdump(error),
        },
    )
    events.emit(
        conn,
        row.instance_id,
        f"step.{state.lower()}",
        step_key=step["key"],
        activation_id=step["activation_id"],
    )


def succeed(conn: Connection, step: dict, output: Any) -> None:
    """The current activation succeeded with ``output`` (MISSING = no output)."""
    _settle(conn, step, S.SUCCEEDED, OPEN, output=output, error=MISSING)


def fail(conn: Connection, step: dict, error: Any) -> None:
    _settle(conn, step, S.FAILED, OPEN, output=MISSING, error=error)


def cancel(conn: Connection, step: dict) -> None:
    _settle(conn, step, S.CANCELLED, OPEN, output=MISSING, error=MISSING)


def close(conn: Connection, step: dict, state: str, *, output: Any = MISSING, error: Any = MISSING) -> None:
    """Operator recovery: SUCCEED_STEP / FAIL_STEP from any resolvable state."""
    _settle(conn, step, state, RESOLVABLE, output=output, error=error)


def end_activation_for_retry(conn: Connection, step: dict) -> None:
    """Operator RETRY_STEP: the current activation ends (CANCELLED unless it already settled)."""
    run(
        conn,
        "UPDATE workflow_steps SET act_state = CASE WHEN act_state IN ('SUCCEEDED', 'FAILED') THEN act_state "
        "ELSE 'CANCELLED' END, completed_at = COALESCE(completed_at, now()) WHERE id = :id AND activation_id = :a",
        {"id": step["id"], "a": step["activation_id"]},
    )


def _move_open(
    conn: Connection, iid: str, state: str, where: str, params: dict, *, completed: bool
) -> list[tuple[str, str | None]]:
    """Every ACTIVE / WAITING step of the instance matching ``where`` (and its activation, when that is
    still open) -> ``state``; returns (key, activation id) of each step moved."""
    done = (
        "CASE WHEN s.act_state = ANY(:from) THEN now() ELSE s.completed_at END"
        if completed
        else "s.completed_at"
    )
    rows = many(
        conn,
        f"UPDATE workflow_steps s SET state = :s, revision = s.revision + 1, updated_at = now(), "
        f"act_state = CASE WHEN s.act_state = ANY(:from) THEN :s ELSE s.act_state END, completed_at = {done} "
        f"WHERE s.instance_id = :id AND s.state = ANY(:from){where} RETURNING s.key, s.activation_id",
        {"id": iid, "s": state, "from": OPEN, **params},
    )
    return [(r.key, r.activation_id) for r in rows]


def cancel_open(conn: Connection, iid: str, *, idle_only: bool = False) -> list[str]:
    """Every ACTIVE / WAITING step of the instance (and its activation) -> CANCELLED. ``idle_only``:
    only those with no in-flight STEP task (a claimed task keeps its permit during a cancel)."""
    idle = (
        " AND NOT EXISTS (SELECT 1 FROM workflow_tasks t WHERE t.activation_id = s.activation_id "
        "AND t.purpose = 'STEP' AND t.state = 'CLAIMED' AND t.lease_expires_at > now())"
        if idle_only
        else ""
    )
    moved = _move_open(conn, iid, S.CANCELLED, idle, {}, completed=True)
    for key, act in moved:
        events.emit(conn, iid, "step.cancelled", step_key=key, activation_id=act)
    return [k for k, _ in moved]


def to_review(conn: Connection, iid: str, keys: list[str]) -> list[str]:
    """Steps whose external outcome is unknown -> NEEDS_REVIEW (with their activations)."""
    moved = _move_open(conn, iid, S.NEEDS_REVIEW, " AND s.key = ANY(:keys)", {"keys": keys}, completed=False)
    for key, act in moved:
        events.emit(conn, iid, "step.needs_review", step_key=key, activation_id=act)
    return [k for k, _ in moved]


# ------------------------------------------------------------------ POLL bookkeeping (W-STEP-3)
def activation_input_of(conn: Connection, act_id: str) -> Any:
    return jparse(
        run(
            conn, "SELECT act_input::text FROM workflow_steps WHERE activation_id = :id", {"id": act_id}
        ).scalar_one()
    )


def poll_round_started(conn: Connection, act_id: str, rnd: int, attempts: int, task_id: str) -> None:
    run(
        conn,
        """
UPDATE workflow_steps SET poll_round_attempts = :att, poll_current_task_id = :task,
    poll_last_task_id = :task, poll_next_at = NULL,
    poll_first_round_attempts_used = CASE WHEN :rnd = poll_first_round THEN :att
                                          ELSE poll_first_round_attempts_used END
WHERE activation_id = :id
""",
        {"id": act_id, "att": attempts, "task": task_id, "rnd": rnd},
    )


def poll_task_ended(
    conn: Connection, act_id: str, *, resolved: bool = False, used: int | None = None
) -> None:
    """The round's task ended: ``resolved`` (done: the round counts as used), or the round is used up
    (``used`` rounds), or neither (another attempt of the same round follows)."""
    sets = "poll_current_task_id = NULL"
    if resolved:
        sets += ", poll_used_rounds = poll_used_rounds + 1, poll_round_attempts = 0, poll_resolved_at = now()"
    elif used is not None:
        sets += ", poll_used_rounds = :u, poll_round_attempts = 0"
    run(conn, f"UPDATE workflow_steps SET {sets} WHERE activation_id = :id", {"id": act_id, "u": used})


def poll_resolved_by_signal(conn: Connection, act_id: str) -> None:
    run(
        conn,
        "UPDATE workflow_steps SET poll_resolved_at = now(), poll_next_at = NULL, "
        "poll_current_task_id = NULL WHERE activation_id = :a",
        {"a": act_id},
    )


def poll_schedule(conn: Connection, act_id: str, seconds: float) -> Any:
    """The next round is due ``seconds`` from now; returns that time."""
    return run(
        conn,
        "UPDATE workflow_steps SET poll_next_at = now() + make_interval(secs => :s) WHERE activation_id = :id "
        "RETURNING poll_next_at",
        {"id": act_id, "s": seconds},
    ).scalar_one()


def set_task_attempts(conn: Connection, act_id: str, attempts: int) -> None:
    run(
        conn,
        "UPDATE workflow_steps SET task_attempts = :n WHERE activation_id = :id",
        {"id": act_id, "n": attempts},
    )


def set_child(conn: Connection, step: dict, child_id: str) -> None:
    """A SUBWORKFLOW activation records its child (a new step revision; the instance's follows)."""
    one(
        conn,
        f"step {step['key']} child",
        step["id"],
        OPEN,
        f"UPDATE workflow_steps SET child_instance_id = :c, {_BUMP} WHERE id = :id AND activation_id = :a "
        "AND state = ANY(:from) RETURNING id",
        {"id": step["id"], "a": step["activation_id"], "c": child_id, "from": OPEN},
    )
