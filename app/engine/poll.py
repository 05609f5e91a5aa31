"""POLL steps (W-STEP-3): rounds of tasks at ``interval_ms``, up to ``max_rounds`` rounds of at most
``max_attempts_per_round`` task attempts each. A task output ``{"done": true, ...}`` resolves the
step; ``done`` false ends the round; a failed / timed-out attempt retries within the round, and a
round whose attempts are used up counts as a used round. Rounds left → the next round is scheduled
``interval_ms`` later through a ``delay_wake`` job (the step is WAITING meanwhile); none left, or the
poll deadline passed → the step FAILED."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from app.engine import steps as engine_steps
from app.engine.store import jparse

_ACT = """
SELECT id, input::text AS input, poll_used_rounds, poll_first_round, poll_first_round_attempts_used,
       poll_round_attempts, poll_deadline_at, poll_current_task_id, poll_last_task_id,
       poll_deadline_at <= now() AS past_deadline
FROM workflow_activations WHERE id = :id
"""


def _act(conn: Connection, act_id: str) -> Any:
    return conn.execute(text(_ACT), {"id": act_id}).first()


def start_round(conn: Connection, inst: dict, step: dict, spec: dict) -> str:
    """Create the next attempt task of the current round (round = used_rounds + 1)."""
    act = _act(conn, step["activation_id"])
    rnd = act.poll_used_rounds + 1
    attempts = act.poll_round_attempts + 1
    task_id = engine_steps.create_task(
        conn,
        inst,
        step,
        act.id,
        spec["queue"],
        jparse(act.input),
        attempt=attempts,
        timeout_seconds=spec.get("timeout_seconds", engine_steps.DEFAULT_TASK_TIMEOUT_SECONDS),
        poll_round=rnd,
    )
    conn.execute(
        text(
            """
UPDATE workflow_activations SET poll_round_attempts = :att, poll_current_task_id = :task,
    poll_last_task_id = :task,
    poll_next_at = NULL,
    poll_first_round_attempts_used = CASE WHEN :rnd = poll_first_round THEN :att
                                          ELSE poll_first_round_attempts_used END
WHERE id = :id
"""
        ),
        {"id": act.id, "att": attempts, "task": task_id, "rnd": rnd},
    )
    conn.execute(
        text(
            "UPDATE workflow_steps SET state = 'ACTIVE', task_id = :task, revision = revision + 1, "
            "updated_at = now() WHERE id = :id"
        ),
        {"id": step["id"], "task": task_id},
    )
    return task_id


def on_result(
    conn: Connection, inst: dict, step: dict, spec: dict, task: dict, kind: str, value: Any
) -> dict:
    """``kind``: "completed" (value = output), "failed" (value = error dict with retryable)."""
    act = _act(conn, step["activation_id"])
    conn.execute(
        text("UPDATE workflow_activations SET poll_current_task_id = NULL WHERE id = :id"), {"id": act.id}
    )
    if kind == "completed" and isinstance(value, dict) and value.get("done") is True:
        conn.execute(
            text(
                "UPDATE workflow_activations SET poll_used_rounds = poll_used_rounds + 1, "
                "poll_round_attempts = 0, "
                "poll_resolved_at = now() WHERE id = :id"
            ),
            {"id": act.id},
        )
        conn.execute(
            text(
                "UPDATE workflow_waits SET state = 'RESOLVED', resolved_at = now() "
                "WHERE activation_id = :id AND state = 'WAITING'"
            ),
            {"id": act.id},
        )
        return engine_steps.complete_step(conn, inst["id"], step, value)
    if kind == "failed":
        if not value.get("retryable", True):
            return engine_steps.fail_step(conn, inst["id"], step, {"code": "TASK_FAILED", **value})
        if act.poll_round_attempts < spec["max_attempts_per_round"] and not act.past_deadline:
            start_round(conn, inst, step, spec)
            return engine_steps.after_change(conn, inst["id"])
    # the round is used up (not done, or its attempts are exhausted)
    used = act.poll_used_rounds + 1
    conn.execute(
        text("UPDATE workflow_activations SET poll_used_rounds = :u, poll_round_attempts = 0 WHERE id = :id"),
        {"id": act.id, "u": used},
    )
    if used >= spec["max_rounds"]:
        return engine_steps.fail_step(conn, inst["id"], step, {"code": "POLL_EXHAUSTED", "used_rounds": used})
    next_at = conn.execute(
        text(
            "UPDATE workflow_activations SET poll_next_at = now() + make_interval(secs => :s) "
            "WHERE id = :id RETURNING poll_next_at, poll_next_at > poll_deadline_at AS late"
        ),
        {"id": act.id, "s": spec["interval_ms"] / 1000.0},
    ).first()
    if next_at.late:
        conn.execute(
            text("UPDATE workflow_activations SET poll_next_at = NULL WHERE id = :id"), {"id": act.id}
        )
        return engine_steps.fail_step(conn, inst["id"], step, {"code": "POLL_DEADLINE_EXCEEDED"})
    engine_steps._job(  # noqa: SLF001 - the engine's own job helper
        conn,
        inst,
        "delay_wake",
        {"wake": "poll", "activation_id": act.id, "round": used + 1},
        step_key=step["key"],
        key=f"poll:{act.id}:{used + 1}",
        run_at=next_at.poll_next_at,
    )
    conn.execute(
        text(
            "UPDATE workflow_steps SET state = 'WAITING', revision = revision + 1, updated_at = now() "
            "WHERE id = :id"
        ),
        {"id": step["id"]},
    )
    return engine_steps.after_change(conn, inst["id"])


def wake(conn: Connection, inst: dict, step: dict, spec: dict, round_no: int) -> bool:
    """The interval passed: start round ``round_no`` if the step still waits for exactly it."""
    act = _act(conn, step["activation_id"])
    if (
        step["state"] != "WAITING"
        or act.poll_current_task_id is not None
        or act.poll_used_rounds + 1 != round_no
    ):
        return False
    if act.past_deadline:
        engine_steps.fail_step(conn, inst["id"], step, {"code": "POLL_DEADLINE_EXCEEDED"})
        return True
    start_round(conn, inst, step, spec)
    engine_steps.after_change(conn, inst["id"])
    return True
