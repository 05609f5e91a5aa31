"""Saga compensation (X-AUTO, W-CTL-3): when an instance fails or is canceled, every completed TASK
step that declares a ``compensation`` gets a compensation task on its queue, **one after another**
in reverse completion order, and the instance ends (FAILED / CANCELLED, by its ``stop_kind``) only
after the last one completed.

- ``stop``: the instance stops without success. No compensation to run → it ends now. Otherwise its
  work is closed now (tasks, waits, steps, clear-scope jobs, children, signals), it stays
  CANCELLING (``stop_kind`` CANCEL or FAILURE says where it is going) and ``compensation_action``
  job 0 is enqueued.
- ``compensation_action`` job *k* creates compensation task *k* (with a ``task_timeout`` job); only
  when that task **completed** (``on_task_result``) is job *k+1* enqueued, or the instance ended.
- A compensation task that fails or times out stops the chain: the instance goes to NEEDS_REVIEW
  (``compensation.state`` FAILED) — the remaining compensations wait for an operator's instance
  recovery (``recovery.resolve_instance``): CONTINUE (the failed one was handled by hand, the chain
  goes on), or CANCEL / FAIL (the instance ends now; the remaining compensations are abandoned).

Lock order: the caller holds the instance row; tasks and jobs come after it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from app.engine import ending, oplog
from app.engine.store import MISSING, jdump, read_instance, step_specs, version_document
from app.ledger.enqueue import enqueue


def final_state(inst: dict) -> str:
    return "CANCELLED" if inst["stop_kind"] == "CANCEL" else "FAILED"


def plan(conn: Connection, inst: dict) -> list[dict]:
    """Completed TASK steps with a declared compensation, newest completion first."""
    specs = step_specs(version_document(conn, inst["definition_version_id"]))
    done = conn.execute(
        text(
            "SELECT s.key, a.id AS activation_id FROM workflow_steps s "
            "JOIN workflow_activations a ON a.id = s.activation_id "
            "WHERE s.instance_id = :id AND s.state = 'SUCCEEDED' AND s.kind = 'TASK' "
            "ORDER BY a.completed_at DESC, a.id DESC"
        ),
        {"id": inst["id"]},
    ).all()
    return [
        {"step_key": r.key, "activation_id": r.activation_id, "queue": specs[r.key]["compensation"]["queue"]}
        for r in done
        if isinstance(specs.get(r.key, {}).get("compensation"), dict)
    ]


def _save(conn: Connection, iid: str, comp: dict, state_sql: str = "state") -> None:
    conn.execute(
        text(
            f"UPDATE workflow_instances SET compensation = CAST(:c AS jsonb), state = {state_sql}, "
            "revision = revision + 1, updated_at = now() WHERE id = :id"
        ),
        {"id": iid, "c": jdump(comp)},
    )


def _enqueue(conn: Connection, inst: dict, comp: dict) -> None:
    k = comp["index"]
    enqueue(
        conn,
        "compensation_action",
        {"index": k, "step_key": comp["plan"][k]["step_key"]},
        instance_id=inst["id"],
        step_key=comp["plan"][k]["step_key"],
        idempotency_key=f"compensation_action:{inst['id']}:{k}",
        trace_id=inst["trace_id"],
    )


def stop(conn: Connection, inst: dict, state: str, *, error: Any = MISSING) -> dict:
    """The instance ends as ``state`` (FAILED / CANCELLED) — after its compensations, if any."""
    steps_plan = plan(conn, inst)
    if not steps_plan:
        return ending.finish_instance(conn, inst, state, error=error)
    iid = inst["id"]
    conn.execute(
        text(
            "UPDATE workflow_instances SET error = COALESCE(CAST(:e AS jsonb), error), "
            "stop_kind = COALESCE(stop_kind, :k), stop_requested_at = COALESCE(stop_requested_at, now()) "
            "WHERE id = :id"
        ),
        {"id": iid, "e": jdump(error), "k": "CANCEL" if state == "CANCELLED" else "FAILURE"},
    )
    ending.close_work(conn, inst, state, error)
    comp = {"plan": steps_plan, "index": 0, "state": "RUNNING", "final": state}
    _save(conn, iid, comp, "'CANCELLING'")
    current = read_instance(conn, iid)
    _enqueue(conn, current, comp)
    oplog.advance(
        conn,
        current,
        "workflow.compensation.started",
        before={"state": inst["state"]},
        after={"final": state, "compensations": [p["step_key"] for p in steps_plan]},
    )
    return current


def running(inst: dict) -> bool:
    """A compensation chain is in progress (running, or failed and waiting for an operator)."""
    comp = inst.get("compensation")
    return bool(comp) and comp.get("state") in ("RUNNING", "FAILED")


def on_task_result(conn: Connection, inst: dict, task: dict, kind: str, value: Any) -> None:
    """A compensation task ended (completed / failed / timed out)."""
    comp = inst.get("compensation")
    if not running(inst) or comp.get("task_id") != task["id"] or comp["state"] != "RUNNING":
        return  # not the compensation the chain waits for
    k = comp["index"]
    item = comp["plan"][k]
    after = {"step_key": item["step_key"], "task_id": task["id"], "order": k + 1}
    if kind != "completed":
        comp = {**comp, "state": "FAILED"}
        _save(conn, inst["id"], comp, "'NEEDS_REVIEW'")
        oplog.advance(
            conn,
            inst,
            "workflow.compensation.failed",
            target_type="step",
            target_id=item["step_key"],
            after={**after, "error": value if value is not MISSING else None,
                   "remaining": [p["step_key"] for p in comp["plan"][k + 1 :]]},
        )  # fmt: skip
        return
    oplog.advance(
        conn,
        inst,
        "workflow.compensation.completed",
        target_type="step",
        target_id=item["step_key"],
        after=after,
    )
    advance(conn, inst, comp)


def advance(conn: Connection, inst: dict, comp: dict) -> dict:
    """Compensation ``comp["index"]`` is done (completed, or handled by an operator): the next one
    starts, or the instance ends in its final state."""
    nxt = {**comp, "index": comp["index"] + 1, "state": "RUNNING"}
    nxt.pop("task_id", None)
    if nxt["index"] < len(nxt["plan"]):
        _save(conn, inst["id"], nxt, "'CANCELLING'")
        _enqueue(conn, inst, nxt)
        return read_instance(conn, inst["id"])
    _save(conn, inst["id"], {**nxt, "index": len(nxt["plan"]), "state": "DONE"})
    return ending.end_instance(conn, read_instance(conn, inst["id"]), comp.get("final") or final_state(inst))


def abandon(conn: Connection, inst: dict, state: str) -> dict:
    """An operator ends a stopping instance now: the remaining compensations are not run."""
    comp = inst.get("compensation") or {}
    if comp:
        _save(conn, inst["id"], {**comp, "state": "ABANDONED"})
    return ending.end_instance(conn, read_instance(conn, inst["id"]), state)
