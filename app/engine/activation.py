"""Activating a step: a numbered activation with its input mapped from ``$.input`` / ``$.steps``, and
the work it waits for — a task (TASK), a timer wait + ``delay_wake`` (TIMER), a signal wait with an
optional timeout (SIGNAL), a ``subprocess_spawn`` job (SUBWORKFLOW; with ``for_each`` it starts the first
children), the first round's task and an optional final-signal wait (POLL), a ``trigger_dispatch`` job
(TRIGGER). Inside the caller's transaction, instance row locked."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine import audit_entries, jobs_and_tasks, mapping
from app.engine.decide import fanout as decide_fanout
from app.engine.states import StepKind, StepState
from app.engine.transitions import step_moves, wait_moves
from app.ledger.states import JobType

K = StepKind


class FanOutRefused(mapping.MappingTooLarge):
    """A fan-out whose items are not an array, or hold more elements than its ``max_items``: the step
    fails with the code, once (as a refused mapping does)."""

    def __init__(self, code: str, reason: str, **details: Any) -> None:
        super().__init__(reason)
        self.code = code
        self.details = details

    def error(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.reason, **self.details}


def fanout_items(spec: dict, mctx: dict) -> list[Any]:
    """The array a fan-out step runs over (``for_each.items``: a reference or a literal array), checked
    against its cap."""
    fe = spec["for_each"]
    items = mapping.resolve(fe["items"], mctx) if isinstance(fe["items"], str) else fe["items"]
    if not isinstance(items, list):
        kind = "absent" if items is None else type(items).__name__
        raise FanOutRefused(
            decide_fanout.NOT_AN_ARRAY, f"for_each.items {fe['items']!r} is not an array ({kind})"
        )
    cap = fe.get("max_items", decide_fanout.FANOUT_DEFAULT_ITEMS)
    if len(items) > cap:
        raise FanOutRefused(
            decide_fanout.TOO_LARGE,
            f"for_each.items has {len(items)} elements, more than max_items ({cap})",
            count=len(items),
            max_items=cap,
        )
    return items


def start_elements(
    conn: Connection,
    inst: dict,
    step: dict,
    spec: dict,
    items: list[Any],
    indexes: Any,
    mctx: dict,
    attempt: int = 1,
) -> list[str]:
    """A task for each element in ``indexes`` (attempt ``attempt``) of the fan-out step's current
    activation: its input is the step's ``input`` mapped with ``$.item`` / ``$.index`` (without one:
    ``{"item", "index"}``); their tasks are inserted in one statement. Raises ``MappingTooLarge`` like
    any mapping (before any task is inserted)."""
    inputs = [(i, element_input(spec, mctx, items, i)) for i in indexes]
    return jobs_and_tasks.element_tasks(conn, inst, step, spec, inputs, attempt=attempt)


def element_input(spec: dict, mctx: dict, items: list[Any], i: int) -> Any:
    """The input of element ``i`` (its task's, or its child workflow's): the step's ``input`` mapped with
    ``$.item`` / ``$.index``; without one, ``{"item", "index"}``."""
    if "input" not in spec:
        return {"item": items[i], "index": i}
    return mapping.resolve(spec["input"], {**mctx, "item": items[i], "index": i})


def activation_input(kind: str, spec: dict, mctx: dict) -> Any:
    # a fan-out: the array, resolved once (the elements read it)
    if kind in (K.TASK, K.SUBWORKFLOW) and "for_each" in spec:
        return {"items": fanout_items(spec, mctx)}
    if kind == K.TIMER:
        return {"delay_seconds": spec["delay_seconds"]}
    if kind == K.TRIGGER:  # the body to send, mapped once at activation (what a retry resends)
        return {"body": mapping.resolve(spec.get("body"), mctx) if "body" in spec else None}
    if kind == K.SIGNAL:
        corr = mapping.resolve(spec["correlation"], mctx)
        corr = corr if isinstance(corr, str) else ("" if corr is None else str(corr))
        return {"name": spec["signal"], "payload_version": spec["payload_version"], "correlation": corr}
    return mapping.resolve(spec.get("input", {}), mctx)


def activated_state(kind: str) -> str:
    """The state a step of ``kind`` is in once activated."""
    return StepState.WAITING if kind in (K.TIMER, K.SIGNAL) else StepState.ACTIVE


def moves_nothing_else(spec: dict) -> bool:
    """Does activating a step of ``spec`` leave every other step as it was, and its own row in
    ``activated_state``, once its own statement ran? Not a SIGNAL or POLL (an early signal may move it on;
    a POLL starts its round after), nor a fan-out (an empty one succeeds at once)."""
    return spec["kind"] in (K.TASK, K.TIMER, K.SUBWORKFLOW, K.TRIGGER) and "for_each" not in spec


def activate(
    conn: Connection, inst: dict, step: dict, spec: dict, mctx: dict, *, allowed: list[str] | None = None
) -> dict:
    """Activation ``sequence + 1`` of ``step``; returns the step row as it now is, in what the engine's
    decisions read (state, activation, task). ``allowed``: the step states it may leave (BLOCKED by
    default; the operator's RETRY_STEP passes the resolvable ones)."""
    return _activate(conn, inst, step, spec, mctx, allowed, None)[0]


def activate_then_progress(
    conn: Connection, inst: dict, step: dict, spec: dict, mctx: dict, progress: str
) -> tuple[dict, Any]:
    """``activate`` of a BLOCKED step (``moves_nothing_else``) whose activation the instance's move to
    ``progress`` (RUNNING / WAITING) follows, the move written by the activation's own statement
    (``step_moves.activate``): the step row, and the instance's row as moved (``instance_moves.progressed``)."""
    return _activate(conn, inst, step, spec, mctx, None, progress)


def _activate(
    conn: Connection,
    inst: dict,
    step: dict,
    spec: dict,
    mctx: dict,
    allowed: list[str] | None,
    progress: str | None,
) -> tuple[dict, Any]:
    kind = step["kind"]
    act_input = activation_input(kind, spec, mctx)
    state = activated_state(kind)
    act = step_moves.insert_activation(
        conn,
        step,
        act_input,
        task_attempts=1 if kind == K.TASK else 0,
        poll_deadline=inst["deadline_at"] if kind == K.POLL else None,
    )
    act_id, seq = act.id, act.sequence
    task_id = None
    rows = step_moves.Activation()  # written with the step's row (one statement at a first activation)
    if kind == K.TASK and "for_each" in spec:  # the first max_parallel elements, one statement
        first = decide_fanout.plan(spec, decide_fanout.Progress(len(act_input["items"])), None)
        indexes = first.indexes if isinstance(first, decide_fanout.StartElements) else ()
        ids = start_elements(
            conn, inst, {**step, "activation_id": act_id}, spec, act_input["items"], indexes, mctx
        )
        task_id = ids[0] if ids else None
    elif kind == K.TASK:
        task_id = jobs_and_tasks.step_task(
            conn, inst, {**step, "activation_id": act_id}, spec, act_input, attempt=1, into=rows
        )
    elif kind == K.TIMER:
        due = wait_moves.insert(
            conn,
            inst["id"],
            act_id,
            "TIMER",
            "now() + make_interval(secs => :secs)",
            secs=spec["delay_seconds"],
        )
        jobs_and_tasks.wake(
            conn,
            inst,
            "timer",
            key=f"timer:{act_id}",
            run_at=due,
            step_key=step["key"],
            into=rows,
            activation_id=act_id,
        )
    elif kind == K.SIGNAL:
        timeout = "timeout_seconds" in spec
        deadline_sql = (
            "LEAST(now() + make_interval(secs => :secs), :inst_deadline)" if timeout else ":inst_deadline"
        )
        params = {"secs": spec["timeout_seconds"]} if timeout else {}
        due = wait_moves.insert(
            conn,
            inst["id"],
            act_id,
            "SIGNAL",
            deadline_sql,
            name=spec["signal"],
            payload_version=spec["payload_version"],
            correlation_key=act_input["correlation"],
            inst_deadline=inst["deadline_at"],
            **params,
        )
        if timeout:  # without one, the instance deadline ends the wait
            jobs_and_tasks.wake(
                conn,
                inst,
                "signal_timeout",
                key=f"signal_timeout:{act_id}",
                run_at=due,
                step_key=step["key"],
                into=rows,
                activation_id=act_id,
            )
    elif kind == K.SUBWORKFLOW and "for_each" in spec and not act_input["items"]:
        pass  # no element, no child: the step succeeds with [] (``driver.make_progress``)
    elif kind in (K.SUBWORKFLOW, K.TRIGGER):  # a fan-out's spawn starts its first children
        job_type = JobType.SUBPROCESS_SPAWN if kind == K.SUBWORKFLOW else JobType.TRIGGER_DISPATCH
        jobs_and_tasks.job(
            conn, inst, job_type, {"activation_id": act_id}, key=act_id, step_key=step["key"], into=rows
        )
    elif kind == K.POLL:
        fs = spec.get("final_signal")
        if fs:
            wait_moves.insert(
                conn,
                inst["id"],
                act_id,
                "SIGNAL",
                ":inst_deadline",
                name=fs["signal"],
                payload_version=fs["payload_version"],
                correlation_key=None,
                inst_deadline=inst["deadline_at"],
            )
    moved = step_moves.activate(
        conn, inst["id"], step, state, act, task_id=task_id, allowed=allowed, work=rows, progress=progress
    )
    if kind == K.POLL:
        start_poll_round(conn, inst, {**step, "activation_id": act_id}, spec, used_rounds=0, round_attempts=0)
    audit_entries.advance(
        conn,
        inst,
        "workflow.step.activated",
        target_type="step",
        target_id=step["key"],
        after={"step_key": step["key"], "kind": kind, "activation_id": act_id, "activation_sequence": seq},
    )
    return {
        **step,
        "state": state,
        "activation_id": act_id,
        "activation_sequence": seq,
        "task_id": task_id,
        "act_state": state,
        "task_attempts": 1 if kind == K.TASK else 0,
        "stored": True,
        "act_input": act_input,
    }, moved


def activate_refused(conn: Connection, inst: dict, step: dict) -> dict:
    """An activation whose input mapping was refused (``mapping.MappingTooLarge``): the activation row
    exists (no input, no work) so the step can fail through ``driver.fail_step`` with the reason."""
    act = step_moves.insert_activation(conn, step, None)
    step_moves.activate(conn, inst["id"], step, StepState.ACTIVE, act)
    return {
        **step,
        "activation_id": act.id,
        "activation_sequence": act.sequence,
        "state": StepState.ACTIVE,
        "stored": True,
    }


def start_poll_round(
    conn: Connection, inst: dict, step: dict, spec: dict, *, used_rounds: int, round_attempts: int
) -> str:
    """The next attempt task of the current POLL round (round = used_rounds + 1); the step is ACTIVE."""
    rnd = used_rounds + 1
    attempts = round_attempts + 1
    act_input = step_moves.activation_input_of(conn, step["activation_id"])
    task_id = jobs_and_tasks.step_task(conn, inst, step, spec, act_input, attempt=attempts, poll_round=rnd)
    step_moves.poll_round_started(conn, step["activation_id"], rnd, attempts, task_id)
    step_moves.set_active(conn, step, task_id)
    return task_id
