"""Step views (W-STEP-1..4): the current activation only; absent values omitted, explicit null kept."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine.decide.fanout import FANOUT_DEFAULT_PARALLEL, Progress
from app.engine.documents import KEY_RE
from app.engine.rerun_links import copied_marks
from app.engine.row_access import (
    MISSING,
    read_instance,
    read_step,
    read_steps,
    read_wait,
    step_specs,
    version_document,
)
from app.errors import NotFound
from app.jsonx import rfc3339
from app.sql import query, run


def _summary(s: dict) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": s["id"],
        "key": s["key"],
        "kind": s["kind"],
        "state": s["state"],
        "revision": str(s["revision"]),
        "after": list(s["after"]),
    }
    if s["activation_id"]:
        out["activation_id"] = s["activation_id"]
        out["activation_sequence"] = s["activation_sequence"]
    if s["kind"] == "TASK" and s["task_id"]:
        out["task_id"] = s["task_id"]
    if s["state"] == "SKIPPED" and isinstance(s.get("act_error"), dict):
        out["skip_reason"] = s["act_error"].get("code")
    return out


def steps_view(conn: Connection, instance_id: str, namespace_id: str) -> dict:
    inst = read_instance(conn, instance_id, namespace_id)
    return {
        "instance_id": inst["id"],
        "revision": str(inst["revision"]),
        "steps": _marked(conn, instance_id, [_summary(s) for s in read_steps(conn, instance_id)[:128]]),
    }


# the last attempt of an activation that failed or timed out, with its error (``ix_workflow_tasks_instance``)
_LAST_FAILED_ATTEMPT = query(
    "view_last_failed_attempt",
    "SELECT attempt, state, error FROM workflow_tasks WHERE instance_id = :i AND activation_id = :a "
    "AND state IN ('FAILED', 'TIMED_OUT') ORDER BY attempt DESC, created_at DESC LIMIT 1",
)


def _marked(conn: Connection, instance_id: str, summaries: list[dict]) -> list[dict]:
    """A rerun's copied steps say so: ``copied_from`` (the workflow whose output the step copied)."""
    marks = copied_marks(conn, instance_id)
    for s in summaries:
        if s["key"] in marks:
            s["copied_from"] = marks[s["key"]]
    return summaries


# every started element's latest task (at most FAN_OUT_LISTED listed; the counts cover them all)
_FAN_OUT = query(
    "fanout_progress",
    """
SELECT DISTINCT ON (element) element, state, attempt, id, next_attempt_at
FROM workflow_tasks WHERE instance_id = :i AND activation_id = :a AND element IS NOT NULL
ORDER BY element, attempt DESC
""",
)
FAN_OUT_LISTED = 1000


# every started element's child workflow (a SUBWORKFLOW step's fan-out), in element order
_FAN_OUT_CHILDREN = query(
    "fanout_progress_children",
    "SELECT parent_element AS element, id, state FROM workflow_instances WHERE parent_activation_id = :a "
    "ORDER BY parent_element",
)


def fan_out_progress(conn: Connection, instance_id: str, s: dict, spec: dict) -> dict[str, Any]:
    """A fan-out step's progress: elements pending (not started), running, done and failed, and the
    task (or child workflow) of each started element (its latest attempt)."""
    items = s["act_input"].get("items")
    total = len(items) if isinstance(items, list) else 0
    if s["kind"] == "SUBWORKFLOW":
        return _children_progress(conn, s, spec, total)
    rows = run(conn, _FAN_OUT, {"i": instance_id, "a": s["activation_id"]}).all()
    # an element waiting for its retry's backoff counts as running (while its step is open)
    waits = s["state"] in ("ACTIVE", "WAITING")
    running = sum(
        1 for r in rows if r.state in ("PENDING", "CLAIMED") or (waits and r.next_attempt_at is not None)
    )
    progress = Progress(total, len(rows), running, sum(1 for r in rows if r.state == "COMPLETED"))
    return {
        "total": total,
        **progress.by_state(),
        "max_parallel": spec["for_each"].get("max_parallel", FANOUT_DEFAULT_PARALLEL),
        "elements": [
            {
                "index": r.element,
                "task_id": r.id,
                "state": r.state,
                "attempt": r.attempt,
                **(
                    {"next_attempt_at": rfc3339(r.next_attempt_at)}
                    if waits and r.next_attempt_at is not None
                    else {}
                ),
            }
            for r in rows[:FAN_OUT_LISTED]
        ],
    }


def _children_progress(conn: Connection, s: dict, spec: dict, total: int) -> dict[str, Any]:
    rows = run(conn, _FAN_OUT_CHILDREN, {"a": s["activation_id"]}).all()
    running = sum(1 for r in rows if r.state not in ("SUCCEEDED", "FAILED", "CANCELLED"))
    progress = Progress(total, len(rows), running, sum(1 for r in rows if r.state == "SUCCEEDED"))
    return {
        "total": total,
        **progress.by_state(),
        "max_parallel": spec["for_each"].get("max_parallel", FANOUT_DEFAULT_PARALLEL),
        "elements": [
            {"index": r.element, "child_workflow_id": r.id, "state": r.state} for r in rows[:FAN_OUT_LISTED]
        ],
    }


def _t(v: Any) -> str | None:
    return rfc3339(v) if v is not None else None


# The time a paused wake of an activation has left (its suspended job keeps it: L-PAUSE).
_PAUSED_REMAINING = query(
    "step_view_paused_remaining",
    "SELECT remaining_ms FROM workflow_jobs WHERE instance_id = :i AND type = 'delay_wake' AND status = 'paused' "
    "AND payload->>'activation_id' = :a AND payload->>'wake' = ANY(:wakes) ORDER BY id DESC LIMIT 1",
)


def paused_remaining_ms(
    conn: Connection, inst: dict, activation_id: str, wakes: tuple[str, ...]
) -> int | None:
    """Milliseconds a paused instance's wake of ``activation_id`` (one of ``wakes``) has left; None when
    the instance is not paused or the wake is not suspended."""
    if not inst["paused"]:
        return None
    left = run(conn, _PAUSED_REMAINING, {"i": inst["id"], "a": activation_id, "wakes": list(wakes)}).scalar()
    return None if left is None else max(0, int(left))


_VIEW_DELAY_WAKE_RUN_AT = query(
    "view_delay_wake_run_at",
    "SELECT run_at FROM workflow_jobs WHERE instance_id = :i AND type = 'delay_wake' "
    "AND status IN ('pending', 'paused') AND payload->>'wake' = 'task_retry' "
    "AND payload->>'activation_id' = :a ORDER BY id DESC LIMIT 1",
)


def step_view(conn: Connection, instance_id: str, namespace_id: str, key: str) -> dict:
    inst = read_instance(conn, instance_id, namespace_id)
    s = read_step(conn, instance_id, key) if KEY_RE.fullmatch(key) else None
    if s is None:
        raise NotFound("step not found")
    out: dict[str, Any] = {
        "instance_id": inst["id"],
        "revision": str(inst["revision"]),
        "step": _marked(conn, instance_id, [_summary(s)])[0],
    }
    if s["state"] == "SKIPPED" and s["act_error"] is not MISSING:  # the skip rule's reason, no activation
        out["skipped"] = s["act_error"]
        if s["completed_at"] is not None:
            out["completed_at"] = rfc3339(s["completed_at"])
    if not s["activation_id"]:
        return out
    if s["act_input"] is not MISSING:
        out["input"] = s["act_input"]
    if s["act_output"] is not MISSING:
        out["output"] = s["act_output"]
    if s["act_error"] is not MISSING:
        out["error"] = s["act_error"]
    out["activated_at"] = rfc3339(s["activated_at"])
    if s["completed_at"] is not None:
        out["completed_at"] = rfc3339(s["completed_at"])
    if s["kind"] == "SUBWORKFLOW" and s["child_instance_id"]:
        out["child_workflow_id"] = s["child_instance_id"]
    if s["kind"] == "TASK" and s["task_attempts"]:
        out["attempts"] = s["task_attempts"]  # the attempts this activation took so far
        failed = run(conn, _LAST_FAILED_ATTEMPT, {"i": instance_id, "a": s["activation_id"]}).first()
        if failed is not None:
            out["last_failed_attempt"] = {
                "attempt": failed.attempt,
                "state": failed.state,
                "error": failed.error,
            }
    if s["kind"] == "TASK" and s["state"] == "WAITING":  # retry backoff: when the next attempt starts
        nxt = run(
            conn,
            _VIEW_DELAY_WAKE_RUN_AT,
            {"i": instance_id, "a": s["activation_id"]},
        ).scalar()
        if nxt is not None:
            out["next_attempt_at"] = rfc3339(nxt)
        left = paused_remaining_ms(conn, inst, s["activation_id"], ("task_retry",))
        if left is not None:  # paused: the backoff's time left, not a time that passes meanwhile
            out["next_attempt_remaining_ms"] = left
    spec = step_specs(version_document(conn, inst["definition_version_id"]))[key]
    if "for_each" in spec and isinstance(s["act_input"], dict):
        out["fan_out"] = fan_out_progress(conn, instance_id, s, spec)
    if s["kind"] == "POLL":
        poll: dict[str, Any] = {
            "used_rounds": s["poll_used_rounds"],
            "first_round": s["poll_first_round"],
            "first_round_attempts_used": s["poll_first_round_attempts_used"],
            "max_rounds": spec["max_rounds"],
            "max_attempts_per_round": spec["max_attempts_per_round"],
            "interval_ms": spec["interval_ms"],
            "deadline_at": _t(s["poll_deadline_at"]),
            "last_task_id": s["poll_last_task_id"],
        }
        for k, col in (
            ("current_task_id", "poll_current_task_id"),
            ("next_poll_at", "poll_next_at"),
            ("resolved_at", "poll_resolved_at"),
        ):
            if s[col] is not None:
                poll[k] = _t(s[col]) if k != "current_task_id" else s[col]
        out["poll"] = poll
    if s["kind"] in ("SIGNAL", "TIMER") or (s["kind"] == "POLL" and spec.get("final_signal")):
        w = read_wait(conn, s["activation_id"])
        if w is not None:
            wait: dict[str, Any] = {"id": w["id"], "kind": w["kind"], "state": w["state"]}
            if w["kind"] != "TIMER":
                wait["name"] = w["name"]
                wait["payload_version"] = w["payload_version"]
            if w["correlation_key"] is not None:
                wait["correlation_key"] = w["correlation_key"]
            wait["deadline_at"] = _t(w["deadline_at"])
            if w["winner_signal_id"]:
                wait["winner_signal_id"] = w["winner_signal_id"]
            if w["resolved_at"] is not None:
                wait["resolved_at"] = _t(w["resolved_at"])
            if w["state"] == "WAITING" and inst["paused"]:
                wait["paused"] = True
                left = paused_remaining_ms(conn, inst, s["activation_id"], ("timer", "signal_timeout"))
                if left is not None:
                    wait["remaining_ms"] = left
            out["wait"] = wait
    return out
