"""Shared plumbing of the engine's job handlers: lock the instance first, write through receipts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, text

from app.engine.store import TERMINAL, lock_instance
from app.ledger.context import JobContext
from app.ledger.outcome import Skip


def run_advance(ctx: JobContext, write: Callable[[Connection, dict], Any]) -> Any:
    """Lock the instance row before the job row (``ctx.lock_first``) and run ``write`` once per
    operation through an effect receipt, so a retried job never advances a step twice."""
    instance_id = ctx.instance_id
    if not instance_id:
        return Skip("job has no instance")
    ctx.lock_first = lambda conn: lock_instance(conn, instance_id)

    def _write(conn: Connection) -> Any:
        inst = lock_instance(conn, instance_id)  # already locked by lock_first: a re-read
        if inst["state"] in TERMINAL:
            return {"skipped": f"workflow is {inst['state']}"}
        return write(conn, inst)

    result = ctx.effect("advance", _write)
    if isinstance(result, dict) and "skipped" in result:
        return Skip(str(result["skipped"]))
    return result


def step_of_activation(conn: Connection, activation_id: str) -> dict | None:
    """The step whose *current* activation is ``activation_id`` (None for an older activation)."""
    from app.engine.store import read_step

    row = conn.execute(
        text(
            "SELECT s.instance_id, s.key FROM workflow_steps s JOIN workflow_activations a ON a.step_id = "
            "s.id "
            "WHERE a.id = :a AND s.activation_id = a.id"
        ),
        {"a": activation_id},
    ).first()
    return read_step(conn, row.instance_id, row.key) if row else None
