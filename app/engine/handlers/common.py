"""Shared plumbing of the engine's job handlers: lock the instance first, write through receipts, and
bind every row a job's payload names (activation, task, signal, child) to the job's own instance."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from app.db import tx
from app.engine.jobs_and_tasks import watch_covers
from app.engine.row_access import lock_instance, lock_instance_fencing, read_step, read_steps
from app.engine.states import TERMINAL
from app.errors import NotFound
from app.ledger.context import Fence, JobContext, LockFirst, RowReceipt
from app.ledger.outcome import PermanentError, ReferenceNotFound, Skip
from app.sql import query, run


class ForeignReference(PermanentError):
    """A job's payload names a row of another workflow instance: the job is dead and changes nothing."""

    code = "FOREIGN_REFERENCE"


def run_locked_once(
    ctx: JobContext,
    write: Callable[[Connection, dict], Any],
    *,
    step: str = "advance",
    receipt: RowReceipt | None = None,
) -> Any:
    """Lock the instance row before the job row (``ctx.lock_first``) and run ``write`` once per
    operation through an effect receipt, so a retried job never advances a step twice: a
    ``workflow_job_effects`` row, or ``receipt`` when ``write`` records its operation on the row it
    moves (``JobContext.effect``; the timer's wait, ``handlers.timers.WaitReceipt``). The receipt is
    read before the instance's state is: a retry answers what its operation did even after the
    workflow moved on or ended."""
    instance_id = ctx.instance_id
    if not instance_id:  # an engine job is always enqueued with its instance: this one was made by hand
        raise ReferenceNotFound("the job names no workflow instance")

    def lock_first(conn: Connection, fence: Fence) -> tuple[dict, float | None]:
        try:
            return _lock_fencing(conn, instance_id, fence)  # the row: ``Tx.locked_instance``
        except NotFound:  # instances are never deleted: this one never existed
            raise ReferenceNotFound(
                f"the job names workflow instance {instance_id}, which does not exist"
            ) from None

    ctx.lock_first = lock_first

    def _write(conn: Connection) -> Any:
        inst = locked_instance(conn, instance_id)
        if inst["state"] in TERMINAL:
            return {"skipped": f"workflow is {inst['state']}"}
        return write(conn, inst)

    result = ctx.effect(step, _write, receipt=receipt)
    if isinstance(result, dict) and "skipped" in result:
        return Skip(str(result["skipped"]))
    return result


def instance_lock_first(instance_id: str) -> LockFirst:
    """A job's ``lock_first`` (``JobContext``): its instance's lock, then its own fence, in one statement."""
    return lambda conn, fence: _lock_fencing(conn, instance_id, fence)


def _lock_fencing(conn: Connection, instance_id: str, fence: Fence) -> tuple[dict, float | None]:
    """``lock_instance_fencing``: the instance and the seconds the job has left; when the instance's watch is
    pending, the transaction knows when it is due (``jobs_and_tasks.watch_covers``): a task it opens that is
    due no later arms nothing."""
    inst, left, watch_in = lock_instance_fencing(conn, instance_id, fence)
    if watch_in is not None:
        watch_covers(conn, instance_id, watch_in)
    return inst, left


def locked_instance(conn: Connection, instance_id: str) -> dict:
    """The instance row this transaction's ``lock_first`` locked and read (nothing wrote it since; taken
    once), else the instance locked now."""
    return tx(conn).take_locked_instance() or lock_instance(conn, instance_id)


def bind(kind: str, row_id: str, owner: str | None, instance_id: str) -> None:
    """Refuse a payload that names ``kind`` ``row_id`` of another instance (or none that exists)."""
    if owner is None:
        raise ForeignReference(f"{kind} {row_id} does not exist")
    if owner != instance_id:
        raise ForeignReference(f"{kind} {row_id} belongs to another workflow, not to {instance_id}")


def step_of_activation(conn: Connection, activation_id: str, instance_id: str) -> dict | None:
    """The step whose *current* activation is ``activation_id`` (None for an older activation); the
    activation must belong to ``instance_id``."""
    current = _owner_of_activation(conn, activation_id, instance_id)
    return read_step(conn, instance_id, current) if current is not None else None


def steps_of_activation(
    conn: Connection, activation_id: str, instance_id: str
) -> tuple[dict | None, dict[str, dict]]:
    """``step_of_activation`` and every step row of the instance by key, in one read when a step's current
    activation is ``activation_id`` (the wake of a live step, as almost every one is): the rows a driver
    call (``driver.complete_step``) takes instead of reading them again. Otherwise the activation is
    looked up as ``step_of_activation`` does (an older activation: None; a foreign one: refused)."""
    rows = {r["key"]: r for r in read_steps(conn, instance_id)}
    for step in rows.values():
        if step["activation_id"] == activation_id:
            return step, rows
    _owner_of_activation(conn, activation_id, instance_id)
    return None, rows


_ACTIVATION_OWNER = query(
    "activation_owner",
    "SELECT a.instance_id, s.key, s.activation_id = a.id AS current FROM workflow_all_activations a "
    "JOIN workflow_steps s ON s.id = a.step_id WHERE a.id = :a",
)


def _owner_of_activation(conn: Connection, activation_id: str, instance_id: str) -> str | None:
    """The key of the step whose current activation is ``activation_id`` (None: an older activation of
    it); refused unless the activation belongs to ``instance_id``."""
    row = run(conn, _ACTIVATION_OWNER, {"a": str(activation_id)}).first()
    bind("activation", activation_id, row.instance_id if row else None, instance_id)
    return row.key if row.current else None
