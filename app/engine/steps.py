"""The step engine's state changes, always inside the caller's transaction with the instance row
already locked (lock order: instance, then tasks, then ledger jobs).

A step becomes ACTIVE (or WAITING for TIMER / SIGNAL) when all its ``after`` steps SUCCEEDED; every
activation is numbered. The instance is RUNNING while work can proceed, WAITING while only waits
remain, SUCCEEDED with its output mapping when every step succeeded, FAILED (stop_kind FAILURE) when
a step fails without recovery or the deadline passes."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from app.engine import mapping
from app.engine.store import MISSING, TERMINAL, jdump, jparse, read_instance, step_specs, version_document
from app.ids import new_id
from app.ledger.enqueue import enqueue

DEFAULT_TASK_TIMEOUT_SECONDS = 300


def _job(
    conn: Connection,
    inst: dict,
    job_type: str,
    payload: dict,
    *,
    step_key: str | None,
    key: str,
    task_id: str | None = None,
    run_at: Any = None,
) -> None:
    enqueue(
        conn,
        job_type,
        payload,
        instance_id=inst["id"],
        step_key=step_key,
        task_id=task_id,
        run_at=run_at,
        idempotency_key=f"{job_type}:{key}",
        trace_id=inst["trace_id"],
    )


def mapping_context(conn: Connection, inst: dict) -> dict[str, Any]:
    rows = conn.execute(
        text(
            "SELECT s.key, a.output::text AS output FROM workflow_steps s "
            "JOIN workflow_activations a ON a.id = s.activation_id "
            "WHERE s.instance_id = :id AND s.state = 'SUCCEEDED'"
        ),
        {"id": inst["id"]},
    )
    outputs = {r.key: jparse(r.output) for r in rows}
    return {
        "input": inst["input"],
        "business_key": inst["business_key"],
        "steps": {k: v for k, v in outputs.items() if v is not MISSING},
    }


def create_task(
    conn: Connection,
    inst: dict,
    step: dict,
    activation_id: str,
    queue: str,
    task_input: Any,
    *,
    attempt: int,
    timeout_seconds: int,
    poll_round: int | None = None,
) -> str:
    """A task on its queue plus the ``task_timeout`` job that enforces its deadline."""
    task_id = new_id()
    deadline = conn.execute(
        text(
            """
INSERT INTO workflow_tasks (id, namespace_id, instance_id, step_id, step_key, activation_id, queue, input,
    attempt, poll_round, deadline_at)
VALUES (:id, :ns, :inst, :step, :key, :act, :queue, CAST(:input AS jsonb), :attempt, :round,
    now() + make_interval(secs => :timeout))
RETURNING deadline_at
"""
        ),
        {
            "id": task_id,
            "ns": inst["namespace_id"],
            "inst": inst["id"],
            "step": step["id"],
            "key": step["key"],
            "act": activation_id,
            "queue": queue,
            "input": jdump(task_input),
            "attempt": attempt,
            "round": poll_round,
            "timeout": timeout_seconds,
        },
    ).scalar_one()
    _job(
        conn,
        inst,
        "task_timeout",
        {"task_id": task_id},
        step_key=step["key"],
        key=task_id,
        task_id=task_id,
        run_at=deadline,
    )
    return task_id


def _set_step(conn: Connection, step_id: str, **sets: Any) -> None:
    assign = "".join(f", {k} = :{k}" for k in sets)
    conn.execute(
        text(f"UPDATE workflow_steps SET revision = revision + 1, updated_at = now(){assign} WHERE id = :id"),
        {"id": step_id, **sets},
    )


def activate(conn: Connection, inst: dict, step: dict, spec: dict, mctx: dict) -> None:
    kind = step["kind"]
    seq = (step["activation_sequence"] or 0) + 1
    act_id = new_id()
    if kind == "TIMER":
        act_input: Any = {"delay_seconds": spec["delay_seconds"]}
    elif kind == "SIGNAL":
        corr = mapping.resolve(spec["correlation"], mctx)
        corr = corr if isinstance(corr, str) else ("" if corr is None else str(corr))
        act_input = {"name": spec["signal"], "payload_version": spec["payload_version"], "correlation": corr}
    else:
        act_input = mapping.resolve(spec.get("input", {}), mctx)
    state = "WAITING" if kind in ("TIMER", "SIGNAL") else "ACTIVE"
    conn.execute(
        text(
            "INSERT INTO workflow_activations (id, instance_id, step_id, sequence, state, input) "
            "VALUES (:id, :inst, :step, :seq, :state, CAST(:input AS jsonb))"
        ),
        {
            "id": act_id,
            "inst": inst["id"],
            "step": step["id"],
            "seq": seq,
            "state": state,
            "input": jdump(act_input),
        },
    )
    task_id = None
    if kind == "TASK":
        task_id = create_task(
            conn,
            inst,
            step,
            act_id,
            spec["queue"],
            act_input,
            attempt=1,
            timeout_seconds=spec.get("timeout_seconds", DEFAULT_TASK_TIMEOUT_SECONDS),
        )
        conn.execute(text("UPDATE workflow_activations SET task_attempts = 1 WHERE id = :id"), {"id": act_id})
    elif kind == "TIMER":
        deadline = _insert_wait(
            conn, inst, act_id, "TIMER", "now() + make_interval(secs => :secs)", secs=spec["delay_seconds"]
        )
        _job(
            conn,
            inst,
            "delay_wake",
            {"wake": "timer", "activation_id": act_id},
            step_key=step["key"],
            key=f"timer:{act_id}",
            run_at=deadline,
        )
    elif kind == "SIGNAL":
        if "timeout_seconds" in spec:
            deadline_sql, params = (
                "LEAST(now() + make_interval(secs => :secs), :inst_deadline)",
                {"secs": spec["timeout_seconds"]},
            )
        else:
            deadline_sql, params = ":inst_deadline", {}
        wait_deadline = _insert_wait(
            conn,
            inst,
            act_id,
            "SIGNAL",
            deadline_sql,
            name=spec["signal"],
            payload_version=spec["payload_version"],
            correlation_key=act_input["correlation"],
            inst_deadline=inst["deadline_at"],
            **params,
        )
        if "timeout_seconds" in spec:  # without one, the instance deadline ends the wait
            _job(
                conn,
                inst,
                "delay_wake",
                {"wake": "signal_timeout", "activation_id": act_id},
                step_key=step["key"],
                key=f"signal_timeout:{act_id}",
                run_at=wait_deadline,
            )
    elif kind == "SUBWORKFLOW":
        _job(conn, inst, "subprocess_spawn", {"activation_id": act_id}, step_key=step["key"], key=act_id)
    elif kind == "POLL":
        from app.engine import poll

        conn.execute(
            text(
                "UPDATE workflow_activations SET poll_used_rounds = 0, poll_first_round = 1, "
                "poll_first_round_attempts_used = 0, poll_round_attempts = 0, poll_deadline_at = :d WHERE "
                "id = :id"
            ),
            {"id": act_id, "d": inst["deadline_at"]},
        )
        fs = spec.get("final_signal")
        if fs:
            _insert_wait(
                conn,
                inst,
                act_id,
                "SIGNAL",
                ":inst_deadline",
                name=fs["signal"],
                payload_version=fs["payload_version"],
                correlation_key=None,
                inst_deadline=inst["deadline_at"],
            )
        _set_step(conn, step["id"], state=state, activation_id=act_id, activation_sequence=seq)
        poll.start_round(conn, inst, {**step, "activation_id": act_id}, spec)
        _audit_activation(conn, inst, step, act_id, seq)
        return
    _set_step(conn, step["id"], state=state, activation_id=act_id, activation_sequence=seq, task_id=task_id)
    _audit_activation(conn, inst, step, act_id, seq)


def _audit_activation(conn: Connection, inst: dict, step: dict, act_id: str, seq: int) -> None:
    """W-AUDIT-3: one ``workflow.step.activated`` row per activation (engine actor)."""
    from app.engine import oplog

    oplog.advance(
        conn,
        inst,
        "workflow.step.activated",
        target_type="step",
        target_id=step["key"],
        after={
            "step_key": step["key"],
            "kind": step["kind"],
            "activation_id": act_id,
            "activation_sequence": seq,
        },
    )


def _insert_wait(
    conn: Connection,
    inst: dict,
    act_id: str,
    kind: str,
    deadline_sql: str,
    *,
    name: str | None = None,
    payload_version: str | None = None,
    correlation_key: str | None = None,
    **params: Any,
) -> Any:
    return conn.execute(
        text(
            "INSERT INTO workflow_waits (id, instance_id, activation_id, kind, name, payload_version, "
            f"correlation_key, deadline_at) VALUES (:id, :inst, :act, :kind, :name, :pv, :corr, "
            f"{deadline_sql}) "
            "RETURNING deadline_at"
        ),
        {
            "id": new_id(),
            "inst": inst["id"],
            "act": act_id,
            "kind": kind,
            "name": name,
            "pv": payload_version,
            "corr": correlation_key,
            **params,
        },
    ).scalar_one()


def _step_rows(conn: Connection, instance_id: str) -> list[dict]:
    rows = conn.execute(
        text(
            "SELECT id, key, kind, state, after, activation_id, activation_sequence FROM workflow_steps "
            "WHERE instance_id = :id AND kind <> 'ROOT'"
        ),
        {"id": instance_id},
    )
    return [dict(r._mapping) for r in rows]


def after_change(conn: Connection, instance_id: str) -> dict:
    """Activate every step whose dependencies succeeded, then recompute the instance state."""
    inst = read_instance(conn, instance_id)
    if inst["state"] in TERMINAL:
        return inst
    doc = version_document(conn, inst["definition_version_id"])
    specs = step_specs(doc)
    rows = _step_rows(conn, instance_id)
    states = {r["key"]: r["state"] for r in rows}
    ready = [
        r for r in rows if r["state"] == "BLOCKED" and all(states.get(d) == "SUCCEEDED" for d in r["after"])
    ]
    # W-CTL: a paused, cancelling or reviewed instance grants no new activation
    if ready and not inst["paused"] and inst["state"] in ("RUNNING", "WAITING"):
        mctx = mapping_context(conn, inst)
        for r in ready:
            activate(conn, inst, r, specs[r["key"]], mctx)
        from app.engine import signals

        if signals.consume_early(conn, inst, [r["key"] for r in ready if r["kind"] in ("SIGNAL", "POLL")]):
            return after_change(conn, instance_id)  # an early signal completed a step just activated
        rows = _step_rows(conn, instance_id)
    elif inst["state"] == "CANCELLING":
        from app.engine import control

        return control.try_finish_cancel(conn, instance_id)
    states_set = {r["state"] for r in rows}
    if states_set <= {"SUCCEEDED", "SKIPPED"}:
        output = mapping.resolve(doc["output"], mapping_context(conn, inst)) if "output" in doc else None
        return finish_instance(conn, inst, "SUCCEEDED", output=output)
    state = "RUNNING" if "ACTIVE" in states_set else ("WAITING" if "WAITING" in states_set else "RUNNING")
    new_state = inst["state"] if inst["state"] in ("CANCELLING", "NEEDS_REVIEW") else state
    conn.execute(
        text(
            "UPDATE workflow_instances SET state = :s, revision = revision + 1, updated_at = now() WHERE "
            "id = :id"
        ),
        {"id": instance_id, "s": new_state},
    )
    return read_instance(conn, instance_id)


def complete_step(conn: Connection, instance_id: str, step: dict, output: Any) -> dict:
    """The current activation succeeded with ``output`` (MISSING = no output); successors start."""
    conn.execute(
        text(
            "UPDATE workflow_activations SET state = 'SUCCEEDED', output = CAST(:o AS jsonb), completed_at "
            "= now() "
            "WHERE id = :id"
        ),
        {"id": step["activation_id"], "o": jdump(output)},
    )
    _set_step(conn, step["id"], state="SUCCEEDED")
    _audit_step(conn, instance_id, step, "succeeded")
    return after_change(conn, instance_id)


def _audit_step(conn: Connection, instance_id: str, step: dict, what: str, error: Any = None) -> None:
    from app.engine import oplog

    after = {"step_key": step["key"], "activation_id": step["activation_id"]}
    if error is not None:
        after["error"] = error
    oplog.advance(
        conn,
        read_instance(conn, instance_id),
        f"workflow.step.{what}",
        target_type="step",
        target_id=step["key"],
        after=after,
    )


def fail_step(conn: Connection, instance_id: str, step: dict, error: dict) -> dict:
    """The current activation failed without recovery: the instance fails (stop_kind FAILURE)."""
    conn.execute(
        text(
            "UPDATE workflow_activations SET state = 'FAILED', error = CAST(:e AS jsonb), completed_at = "
            "now() "
            "WHERE id = :id"
        ),
        {"id": step["activation_id"], "e": jdump(error)},
    )
    _set_step(conn, step["id"], state="FAILED")
    _audit_step(conn, instance_id, step, "failed", error)
    inst = read_instance(conn, instance_id)
    if inst["cancel_requested_at"] is not None:  # a cancel is settling: it decides the end state
        from app.engine import control

        return control.try_finish_cancel(conn, instance_id)
    from app.engine import saga  # X-AUTO: a failed instance compensates its completed steps first

    return saga.stop(conn, inst, "FAILED", error={"step_key": step["key"], **error})


# the end of an instance lives in ``ending`` (re-exported: callers use ``steps.finish_instance``)
from app.engine.ending import finish_instance, stop_children  # noqa: E402, F401
