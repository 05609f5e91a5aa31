"""``delay_wake`` jobs, one table of wakes: a TIMER step is due, a SIGNAL wait timed out, a POLL round
is due, a TASK step's retry backoff passed, an early signal expired, a cancel's in-flight leases ran out;
and ``deadline``: an instance's deadline passed (then it FAILS, stop_kind FAILURE), a wake only jobs
enqueued before instances had a watch carry (the watch, ``handlers.task_timeouts``, enforces the
deadline now). Each wake asks its decision in ``app.engine.decide`` and applies it through ``app.engine.driver`` / ``stopping``. An unknown wake
is a permanent failure (the job is dead), never a silent success.

The two wakes that end a wait (``timer``, ``signal_timeout``) keep their effect receipt on the wait: the
guarded UPDATE that resolves or expires it records the job's operation, and a retry of that operation
finds it there (``WaitReceipt``) instead of in a ``workflow_job_effects`` row. The others write a
receipt row (``run_locked_once``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from app.db_time import is_past
from app.engine import activation, driver, signal_match, snapshot, stopping
from app.engine.decide import stopping as decide_stopping
from app.engine.decide import wakes as decide
from app.engine.decide.model import FailStep, Ignore
from app.engine.handlers.common import bind, run_locked_once, step_of_activation, steps_of_activation
from app.engine.row_access import step_specs, version_document
from app.engine.snapshot import inst_model, step_model
from app.engine.transitions import wait_moves
from app.ledger import handlers
from app.ledger.context import JobContext
from app.ledger.outcome import PermanentError
from app.sql import query, run


@dataclass(frozen=True)
class WaitReceipt:
    """The receipt of a wake that ends a wait, kept on the wait (``app.ledger.context.RowReceipt``):
    ``wait_moves.try_fire_due`` / ``try_expire_due`` record the job's operation key on the wait in
    the UPDATE that ends it, so the ended wait is the record of the wake's result, as an ended task is
    the record of its result. A retry of the same operation finds the wait ended, writes nothing, then finds
    its key there and answers ``{answer: step key}`` again, what the first execution answered; a wait
    ended by another operation (or by a signal, a poll, a cancel) holds no receipt of this one, and the
    wake is skipped."""

    instance_id: str | None
    activation_id: str | None  # as the job's payload names it (none, or a foreign one: no receipt)
    answer: str  # the key of the wake's result: "fired", "expired"

    def read(self, conn: Connection, operation_key: str) -> tuple[bool, Any]:
        step_key = wait_moves.ended_by(conn, self.instance_id, self.activation_id, operation_key)
        return (False, None) if step_key is None else (True, {self.answer: step_key})

    def moved(self, result: Any) -> bool:
        """The wake ended the wait: its result names the step (every other answer wrote nothing)."""
        return isinstance(result, dict) and self.answer in result


def _timer(conn: Connection, inst: dict, p: dict, operation_key: str) -> dict:
    activation_id = str(p["activation_id"])
    # the wait resolved (when due, and its step still waits on it), the step SUCCEEDED and the steps read
    # as they were before, in one statement
    fired = wait_moves.try_fire_due(conn, inst["id"], activation_id, operation_key)
    if fired is None:  # nothing written: why (the steps read again, on this rare path alone)
        step, _ = steps_of_activation(conn, activation_id, inst["id"])
        if isinstance(skip := decide.timer_due(step_model(step)), Ignore):
            return {"skipped": skip.reason}
        return {"skipped": "the timer is not due or already resolved"}
    stored, steps = fired
    rows = {r["key"]: r for r in steps}
    step = next((r for r in steps if r["activation_id"] == activation_id), None)
    if isinstance(decide.timer_due(step_model(step)), Ignore):  # the statement's guard is this rule's
        raise RuntimeError(f"timer of activation {activation_id}: its wait resolved, its step does not wait")
    assert step is not None
    # ``inst`` is the row run_locked_once locked, ``rows`` were read under that lock (the fired step as it
    # was: ``step_succeeded`` settles it): progress settles from them without reading them again
    driver.step_succeeded(conn, inst["id"], step, stored, inst=inst, rows=rows)
    return {"fired": step["key"]}


def _signal_timeout(conn: Connection, inst: dict, p: dict, operation_key: str) -> dict:
    step = step_of_activation(conn, p["activation_id"], inst["id"])
    if isinstance(skip := decide.signal_timeout(step_model(step)), Ignore):
        return {"skipped": skip.reason}
    assert step is not None  # signal_timeout answers Ignore without a step
    if not wait_moves.try_expire_due(conn, p["activation_id"], operation_key):
        return {"skipped": "the wait was resolved or is not due"}
    driver.fail_step(conn, inst["id"], step, dict(decide.SIGNAL_TIMEOUT))
    return {"expired": step["key"]}


def _poll(conn: Connection, inst: dict, p: dict) -> dict:
    round_no = int(p["round"])
    step = step_of_activation(conn, p["activation_id"], inst["id"])
    poll = snapshot.poll(conn, p["activation_id"])[0] if step is not None else None
    verdict = decide.poll_wake(step_model(step), poll, round_no)
    if isinstance(verdict, Ignore):
        return {"skipped": verdict.reason}
    assert step is not None and poll is not None  # poll_wake answers Ignore without them
    if isinstance(verdict, FailStep):
        driver.fail_step(conn, inst["id"], step, verdict.error)
        return {"round": round_no}
    spec = step_specs(version_document(conn, inst["definition_version_id"]))[step["key"]]
    activation.start_poll_round(
        conn,
        inst,
        step,
        spec,
        used_rounds=poll.used_rounds,
        round_attempts=poll.round_attempts,
    )
    driver.make_progress(conn, inst["id"])
    return {"round": round_no}


def _task_retry(conn: Connection, inst: dict, p: dict) -> dict:
    attempt = int(p["attempt"])
    step = step_of_activation(conn, p["activation_id"], inst["id"])
    if isinstance(skip := decide.task_retry(step_model(step), attempt), Ignore):
        return {"skipped": skip.reason}
    assert step is not None  # task_retry answers Ignore without a step
    spec = step_specs(version_document(conn, inst["definition_version_id"]))[step["key"]]
    task_id = driver.start_next_attempt(conn, inst, step, spec)
    driver.make_progress(conn, inst["id"])
    return {"attempt": attempt, "task_id": task_id}


def _element_retry(conn: Connection, inst: dict, p: dict) -> dict:
    """A fan-out element's backoff passed: its next attempt starts (``driver.element_retry_due``)."""
    step = step_of_activation(conn, p["activation_id"], inst["id"])
    if step is None or step["state"] not in ("ACTIVE", "WAITING"):
        return {"skipped": "the element's activation is no longer current"}
    spec = step_specs(version_document(conn, inst["definition_version_id"]))[step["key"]]
    return driver.element_retry_due(conn, inst, step, spec, str(p["task_id"]), int(p["attempt"]))


def _deadline(conn: Connection, inst: dict, p: dict) -> dict:
    due = is_past(conn, inst["deadline_at"])
    verdict = decide_stopping.deadline_passed(inst_model(inst), due)
    if isinstance(verdict, Ignore):
        return {"skipped": verdict.reason}
    stopping.apply_stop(conn, inst, verdict)
    return {"failed": "DEADLINE_EXCEEDED"}


_SIGNAL_OWNER = query(
    "signal_owner",
    "SELECT instance_id FROM workflow_signals WHERE id = :id",
)


def _signal_expiry(conn: Connection, inst: dict, p: dict) -> dict:
    sig_id = str(p["signal_id"])
    owner = run(conn, _SIGNAL_OWNER, {"id": sig_id}).scalar()
    bind("signal", sig_id, owner, inst["id"])
    if not signal_match.expire(conn, sig_id, inst["id"]):
        return {"skipped": "the signal was settled or is not due"}
    return {"expired_signal": sig_id}


def _finish_cancel(conn: Connection, inst: dict, p: dict) -> dict:
    if inst["state"] != "CANCELLING":
        return {"skipped": f"the workflow is {inst['state']}"}
    return {"state": stopping.finish_cancel(conn, inst["id"])["state"]}


# the wakes that end a wait: each records its operation on the wait (the operation key is its last
# argument), and the key of its result names the wait's receipt (``WaitReceipt.answer``)
WAIT_WAKES: dict[str, tuple[Callable[[Connection, dict, dict, str], dict], str]] = {
    "timer": (_timer, "fired"),
    "signal_timeout": (_signal_timeout, "expired"),
}

# the other wakes: their receipt is a ``workflow_job_effects`` row
WAKES: dict[str, Callable[[Connection, dict, dict], dict]] = {
    "poll": _poll,
    "task_retry": _task_retry,
    "element_retry": _element_retry,
    "deadline": _deadline,
    "signal_expiry": _signal_expiry,
    "cancel_settle": _finish_cancel,
}


@handlers.register("delay_wake")
def delay_wake(ctx: JobContext):
    p = ctx.payload or {}
    name = p.get("wake")
    if name in WAIT_WAKES:
        ends_wait, answer = WAIT_WAKES[name]
        op, act = ctx.operation_key, p.get("activation_id")
        receipt = WaitReceipt(ctx.instance_id, None if act is None else str(act), answer)
        return run_locked_once(ctx, lambda conn, inst: ends_wait(conn, inst, p, op), receipt=receipt)
    wake = WAKES.get(name)  # type: ignore[arg-type]  # any value: None when unknown
    if wake is None:
        known = ", ".join(sorted([*WAIT_WAKES, *WAKES]))
        raise PermanentError(f"unknown wake {name!r}: one of {known}")
    return run_locked_once(ctx, lambda conn, inst: wake(conn, inst, p))
