"""One workflow instance as an operator reads it (the console's workflow page): what happened
and why, in a fixed number of statements whatever the number of steps.

- ``steps``: every step in the order of the definition's graph (``graph_order``: each step after the
  steps it waits for, the document's order among equals), with its current activation's state,
  attempts, start, end, last error and, for a TIMER, a wait or a retry backoff, the time it fires;
- ``failure``: why the instance failed, stopped or waits for review, and the step it came from;
- ``spans``: every activation and every task attempt over time (the timeline), bounded.

``graph_order`` and ``graph_layers`` are pure (unit-tested); the reads are indexed by instance."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from app import db_time
from app.engine import stopping, views
from app.engine.row_access import MISSING, jparse, read_steps, step_specs, version_document
from app.ledger.states import EXTERNAL_OUTCOME_UNKNOWN
from app.sql import query, run

MAX_SPANS = 2000  # activations + task attempts drawn on one timeline
REVIEW_STATES = ("NEEDS_REVIEW",)


def graph_layers(steps: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The depth of each step: 0 for a step that waits for none, else one more than the deepest step
    it waits for (``after``). References to unknown keys are ignored; a cycle (refused at publish)
    cannot loop: a step on one gets the depth it had when the cycle was met."""
    after = {s["key"]: [a for a in (s.get("after") or ()) if isinstance(a, str)] for s in steps}
    depth: dict[str, int] = {}
    visiting: set[str] = set()

    def visit(key: str) -> int:
        if key in depth:
            return depth[key]
        if key in visiting or key not in after:
            return -1
        visiting.add(key)
        d = 1 + max((visit(a) for a in after[key]), default=-1)
        visiting.discard(key)
        depth[key] = max(d, 0)
        return depth[key]

    for key in after:
        visit(key)
    return depth


def graph_order(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """Step keys so that every step comes after the steps it waits for; among steps of one depth the
    document's order (a chain reads top to bottom, parallel branches side by side)."""
    depth = graph_layers(steps)
    position = {s["key"]: i for i, s in enumerate(steps)}
    return sorted(depth, key=lambda k: (depth[k], position[k]))


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else max((end - start).total_seconds(), 0.0)


_OVERVIEW_WAITS = query(
    "overview_waits",
    "SELECT activation_id, kind, state, name, correlation_key, deadline_at, resolved_at FROM workflow_waits "
    "WHERE activation_id = ANY(CAST(:ids AS text[]))",
)


def _waits(conn: Connection, activation_ids: list[str]) -> dict[str, dict[str, Any]]:
    if not activation_ids:
        return {}
    rows = run(
        conn,
        _OVERVIEW_WAITS,
        {"ids": activation_ids},
    )
    return {r.activation_id: dict(r._mapping) for r in rows}


_OVERVIEW_DUE_WAKES = query(
    "overview_due_wakes",
    "SELECT DISTINCT ON (payload->>'activation_id') payload->>'activation_id' AS activation_id, "
    "payload->>'wake' AS wake, run_at, CASE WHEN status = 'paused' THEN remaining_ms END AS remaining_ms "
    "FROM workflow_jobs "
    "WHERE instance_id = :i AND type = 'delay_wake' AND status IN ('pending', 'paused') "
    "AND payload ? 'activation_id' ORDER BY payload->>'activation_id', run_at",
)


def _due_wakes(conn: Connection, instance_id: str) -> dict[str, tuple[datetime, str, int | None]]:
    """``{activation id: (run_at, wake, remaining ms)}`` of the instance's next pending wake-up per
    activation (a TIMER's fire, a retry's backoff, a signal wait's timeout, a POLL's next round): what the
    ledger will do next and when. A wake suspended by a pause has its time left (``remaining_ms``) instead:
    its ``run_at`` passes while the workflow is paused."""
    rows = run(
        conn,
        _OVERVIEW_DUE_WAKES,
        {"i": instance_id},
    )
    return {r.activation_id: (r.run_at, r.wake, r.remaining_ms) for r in rows if r.activation_id}


WAKE_LABELS = {
    "timer": "fires",
    "task_retry": "next attempt",
    "signal_timeout": "times out",
    "poll": "next round",
}


def steps_in_order(conn: Connection, inst: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every step of ``inst`` in graph order with its current activation (see the module text)."""
    doc = version_document(conn, inst["definition_version_id"])
    specs = step_specs(doc)
    rows = {s["key"]: s for s in read_steps(conn, inst["id"])}
    acts = [s["activation_id"] for s in rows.values() if s["activation_id"]]
    waits = _waits(conn, acts)
    wakes = _due_wakes(conn, inst["id"])
    out = []
    for key in graph_order(doc["steps"]):
        s = rows.get(key)
        if s is None:
            continue
        spec = specs.get(key, {})
        started, ended = s["activated_at"], s["completed_at"]
        item: dict[str, Any] = {
            "key": key,
            "kind": s["kind"],
            "state": s["state"],
            "after": list(spec.get("after") or ()),
            "activation": s["activation_sequence"],
            "attempts": s["task_attempts"],
            "max_attempts": (spec.get("retry") or {}).get("max_attempts"),
            "started_at": started if s["activation_id"] else None,
            "ended_at": ended,
            "seconds": _seconds(started, ended) if s["activation_id"] else None,
            "task_id": s["task_id"],
            "child_workflow_id": s["child_instance_id"],
            "queue": spec.get("queue"),
        }
        for k, col in (("input", "act_input"), ("output", "act_output"), ("error", "act_error")):
            if s[col] is not MISSING:
                item[k] = s[col]
        if s["state"] == "SKIPPED":  # the skip rule's reason, not an error
            item["skipped"] = item.pop("error", None)
        if "for_each" in spec and s["activation_id"] and isinstance(s["act_input"], dict):
            item["fan_out"] = views.fan_out_progress(conn, inst["id"], s, spec)
        wait = waits.get(s["activation_id"]) if s["activation_id"] else None
        if wait is not None:
            item["wait"] = wait
        fire = wakes.get(s["activation_id"]) if s["activation_id"] else None
        if fire is None and wait is not None and wait["state"] == "WAITING" and wait["deadline_at"]:
            fire = (wait["deadline_at"], "timer" if wait["kind"] == "TIMER" else "signal_timeout", None)
        if fire is not None and s["state"] in ("ACTIVE", "WAITING"):
            item["fires"] = WAKE_LABELS.get(fire[1], fire[1])
            if fire[2] is not None:  # paused: the time left, no fire time
                item["paused_remaining_seconds"] = max(0, fire[2]) / 1000
            else:
                item["fires_at"] = fire[0]
        out.append(item)
    return out


def _reason(err: Mapping[str, Any], step_key: str | None) -> dict[str, Any]:
    return {
        "code": err.get("code"),
        "message": err.get("message"),
        "step_key": step_key,
        "detail": {k: v for k, v in err.items() if k not in ("code", "message", "step_key")},
    }


def failure(inst: Mapping[str, Any], steps: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Why the instance failed, is stopping or waits for review, and the step it came from: the
    instance's recorded error (``step_key`` names the step), else the first step (graph order) that
    failed or waits for review, with its last error."""
    steps = list(steps)
    culprit = next((s for s in steps if s["state"] in ("FAILED", *REVIEW_STATES)), None)
    err = inst.get("error")
    if isinstance(err, dict):
        return _reason(err, err.get("step_key") or (culprit["key"] if culprit else None))
    if inst["state"] not in ("FAILED", "NEEDS_REVIEW", "CANCELLING", "CANCELLED") or culprit is None:
        return None
    step_err = culprit.get("error")
    if isinstance(step_err, dict):
        return _reason(step_err, culprit["key"])
    return {
        "code": None,
        "message": f"step {culprit['key']} is {culprit['state']}",
        "step_key": culprit["key"],
        "detail": {},
    }


def review_cause(conn: Connection, inst: Mapping[str, Any]) -> dict[str, Any] | None:
    """Why a NEEDS_REVIEW instance waits for a person when no step error says it: the outcome of an
    external call is unknown (its ledger jobs, L-EFFECT), or a compensation failed (its step)."""
    if inst["state"] != "NEEDS_REVIEW":
        return None
    comp = inst.get("compensation") or {}
    if comp.get("state") == "FAILED" and comp.get("plan"):
        item = comp["plan"][min(comp.get("index", 0), len(comp["plan"]) - 1)]
        undo = compensation_tasks(conn, inst["id"], item.get("step_key"))
        error = undo[0]["error"] if undo else None
        why = f" ({error_text(error)})" if error is not None else ""
        return {
            "code": "COMPENSATION_FAILED",
            "step_key": item.get("step_key"),
            "jobs": [],
            "message": f"the compensation of step {item.get('step_key')} failed{why}: resolve the workflow",
            "task_id": undo[0]["id"] if undo else None,
        }
    jobs = stopping.unknown_outcome_jobs(conn, inst["id"])
    if jobs:
        keys = sorted({j["step_key"] for j in jobs if j["step_key"]})
        return {
            "code": EXTERNAL_OUTCOME_UNKNOWN,
            "step_key": keys[0] if keys else None,
            "jobs": [str(j["id"]) for j in jobs],
            "message": "the outcome of an external call is unknown (it may or may not have happened): "
            "check it, then resolve" + (f" step {', '.join(keys)}" if keys else " the workflow"),
        }
    return None


# a step's compensation tasks (the saga's undos), newest first; a step is compensated at most once per
# stop, so a handful at most
COMPENSATION_TASKS = query(
    "step_compensation_tasks",
    """
SELECT id, state, attempt, error::text AS error, created_at, completed_at FROM workflow_tasks
WHERE instance_id = :i AND step_key = :k AND purpose = 'COMPENSATION'
ORDER BY created_at DESC, id DESC LIMIT 20
""",
)


def compensation_tasks(conn: Connection, instance_id: str, step_key: str | None) -> list[dict[str, Any]]:
    """The compensation tasks of a step, newest first, each with its error (parsed) when it failed."""
    if not step_key:
        return []
    rows = run(conn, COMPENSATION_TASKS, {"i": instance_id, "k": step_key}).all()
    return [{**r._mapping, "error": jparse(r.error)} for r in rows]


def error_text(error: Any) -> str:
    """One line of a task's error: its message (and code), or the JSON as it is."""
    if isinstance(error, dict) and error.get("message"):
        code = error.get("code")
        return f"{code}: {error['message']}" if code else str(error["message"])
    return str(error)


_OVERVIEW_ACTIVATION_SPANS = query(
    "overview_activation_spans",
    "SELECT s.key, a.sequence, a.state, a.activated_at AS start, a.completed_at AS end FROM workflow_all_activations a "
    "JOIN workflow_steps s ON s.id = a.step_id WHERE a.instance_id = :i ORDER BY a.activated_at, a.id LIMIT :n",
)


_OVERVIEW_TASK_SPANS = query(
    "overview_task_spans",
    "SELECT step_key AS key, attempt, poll_round, purpose, state, created_at AS start, completed_at AS end, "
    "error::text AS error FROM workflow_tasks WHERE instance_id = :i ORDER BY created_at, id LIMIT :n",
)


def spans(conn: Connection, instance_id: str, limit: int = MAX_SPANS) -> dict[str, Any]:
    """The timeline's rows: every activation (step key, sequence, state, start, end) and every task
    attempt (step key, attempt, purpose, state, start, end), oldest first, at most ``limit`` together;
    ``truncated`` says when there were more."""
    acts = run(
        conn,
        _OVERVIEW_ACTIVATION_SPANS,
        {"i": instance_id, "n": limit + 1},
    ).all()
    tasks = run(
        conn,
        _OVERVIEW_TASK_SPANS,
        {"i": instance_id, "n": limit + 1},
    ).all()
    truncated = len(acts) + len(tasks) > limit
    keep_tasks = max(limit - min(len(acts), limit), 0)
    return {
        "activations": [dict(r._mapping) for r in acts[:limit]],
        "attempts": [
            {**dict(r._mapping), "error": None if r.error is None else jparse(r.error)}
            for r in tasks[:keep_tasks]
        ],
        "truncated": truncated,
    }


def db_now(conn: Connection) -> datetime:
    return db_time.db_now(conn)
