"""Offering PENDING signals to their waits (W-SIG-4/5), expiry and closing, with the signal-resource
audit (X-HIST: one engine row per state change of a signal). The decision is ``decide.signals.offer``;
the caller runs the driver afterwards when a step succeeded."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine import audit_entries
from app.engine.decide import signals as decide
from app.engine.decide.model import Consume
from app.engine.row_access import read_signal, read_step, read_wait
from app.engine.snapshot import step_model
from app.engine.states import StepKind
from app.engine.transitions import signal_moves, step_moves, task_moves, wait_moves
from app.sql import query, run


def audit_disposed(conn: Connection, rows: Any) -> None:
    for r in rows:
        after = {"state": r.state, "revision": str(r.revision)}
        if r.disposition:
            after["disposition"] = r.disposition
        if r.consumed_wait_id:
            after["consumed_wait_id"] = r.consumed_wait_id
        audit_entries.advance(
            conn,
            {"id": r.instance_id, "namespace_id": r.namespace_id},
            f"signal.{r.state.lower()}",
            target_type="signal",
            target_id=r.id,
            before={"state": "PENDING"},
            after=after,
        )


def consume(conn: Connection, inst: dict, step: dict, sig: dict) -> bool:
    """Offer a PENDING signal to the wait of its (current) activation. True when it won and the step
    succeeded with the payload; the caller then runs ``driver.make_progress``."""
    wait = read_wait(conn, step["activation_id"]) if step["activation_id"] else None
    verdict = decide.offer(step_model(step), wait, sig)
    if not isinstance(verdict, Consume):
        audit_disposed(conn, signal_moves.dispose(conn, sig["id"], "REJECTED", verdict.disposition, None))
        return False
    assert wait is not None  # offer consumes only into a waiting wait
    wait_moves.resolve_by_signal(conn, wait["id"], sig["id"])
    audit_disposed(conn, signal_moves.dispose(conn, sig["id"], "CONSUMED", None, wait["id"]))
    act = step["activation_id"]
    if step["kind"] == StepKind.POLL:  # the signal wins: queued rounds stop, an in-flight one may still end
        task_moves.cancel_open(conn, activation_id=act, pending_only=True)
        step_moves.poll_resolved_by_signal(conn, act)
    step_moves.succeed(conn, step, sig["payload"])
    audit_entries.advance(
        conn,
        inst,
        "workflow.step.succeeded",
        target_type="step",
        target_id=step["key"],
        after={"step_key": step["key"], "signal_id": sig["id"], "wait_id": wait["id"]},
    )
    return True


_Q_SIGNAL_MATCH_CONSUME_EARLY = query(
    "signal_match_consume_early",
    "SELECT id FROM workflow_signals WHERE instance_id = :i AND target_step_key = :k "
    "AND target_activation_sequence = :s AND state = 'PENDING' ORDER BY accepted_at, id",
)


def consume_early(conn: Connection, inst: dict, keys: list[str]) -> bool:
    """Steps that just activated take their earliest matching PENDING signal (W-SIG-4)."""
    won = False
    for key in keys:
        step = read_step(conn, inst["id"], key)
        if step is None or not step["activation_id"]:
            continue
        pending = run(
            conn,
            _Q_SIGNAL_MATCH_CONSUME_EARLY,
            {"i": inst["id"], "k": key, "s": step["activation_sequence"]},
        ).all()
        for (sig_id,) in pending:
            if consume(conn, inst, step, read_signal(conn, sig_id)):
                won = True
                step = read_step(conn, inst["id"], key)
                assert step is not None  # the step that just took the signal
    return won


def expire(conn: Connection, sig_id: str, instance_id: str) -> bool:
    """The ``signal_expiry`` wake: still PENDING at expires_at -> EXPIRED."""
    rows = signal_moves.try_expire(conn, sig_id, instance_id)
    audit_disposed(conn, rows)
    return bool(rows)


def close_pending(conn: Connection, instance_id: str) -> None:
    """The instance finished: signals still pending can never be consumed."""
    audit_disposed(conn, signal_moves.close_pending(conn, instance_id))
