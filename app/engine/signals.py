"""Signals with identity (W-SIG): acceptance, consumption by the matching wait, expiry.

Acceptance and consumption are separate. A signal names the step and the activation sequence it is
for; it is stored PENDING, then:

- CONSUMED by the wait of exactly that activation when name, payload_version and the correlation
  key (byte for byte, trailing spaces kept; a POLL's final-signal wait has no correlation) match and
  the wait is still WAITING: the wait records ``winner_signal_id``, the signal ``consumed_wait_id``
  and the step succeeds with the payload as its output. This happens at once when the activation
  exists, or when the step activates (an *early* signal for activation 1).
- REJECTED with a ``disposition``: STALE_ACTIVATION (an older activation), CORRELATION_MISMATCH,
  WAIT_CLOSED (the wait was resolved, expired or canceled first; W-SIG-5: the first event in time
  wins, and results and signals are applied under the instance lock in the order they happen),
  WORKFLOW_ENDED (the instance finished while it was pending).
- EXPIRED when still pending at ``expires_at`` (a ``delay_wake`` job with wake ``signal_expiry``).

A future activation is refused (409 STATE_CONFLICT) and not stored. At most ``signal_limit()``
signals are accepted per instance over its life (409 WORKFLOW_SIGNAL_LIMIT)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from app import cursor as cursors
from app.engine import driver, jobs_and_tasks, signal_match
from app.engine.contracts import input_errors
from app.engine.decide import signals as decide
from app.engine.decide.model import Refuse
from app.engine.row_access import _SIGNAL_COLS as _COLS
from app.engine.row_access import (
    MISSING,
    lock_instance,
    read_instance,
    read_signal,
    read_step,
    read_wait,
    signal_row,
    step_specs,
    version_document,
)
from app.engine.states import TERMINAL
from app.engine.transitions import signal_moves
from app.errors import InvalidArgument, LimitExceeded, NotFound, StateConflict
from app.ids import is_hex32, new_id
from app.jsonx import rfc3339
from app.settings import SIGNAL_LIMIT
from app.sql import query, run

MAX_CORRELATION_BYTES = 512


def signal_limit() -> int:
    """W-SIG-3: accepted signals per instance over its whole life (lowered by tests)."""
    return SIGNAL_LIMIT.get()


_Q_SIGNALS_SEND = query(
    "signals_send",
    "SELECT count(*) FROM workflow_signals WHERE instance_id = :id",
)


def send(
    conn: Connection,
    instance_id: str,
    actor_id: str,
    req: dict,
    on_accepted: Callable[[Connection, dict], None] | None = None,
) -> dict:
    """Accept one signal (the caller checked namespace and queue scope). Returns the stored row.
    ``on_accepted`` runs right after the signal row exists (the caller's acceptance audit comes before
    the engine's audit of its consumption)."""
    # The pinned version never changes: the tenant's contract is evaluated *before* the instance lock,
    # so a slow contract can never hold up the instance's other work.
    doc = version_document(conn, read_instance(conn, instance_id)["definition_version_id"])
    contracts = {(s["name"], s["payload_version"]): s.get("schema", {}) for s in doc.get("signals", [])}
    key = (req["name"], req["payload_version"])
    if key not in contracts:
        raise InvalidArgument(
            f"the pinned version declares no signal contract ({key[0]}, {key[1]})", field="name"
        )
    errors = input_errors(contracts[key], req["payload"], prefix="payload")
    if errors:
        raise InvalidArgument("payload does not satisfy the pinned signal contract", errors=errors)
    inst = lock_instance(conn, instance_id)
    if inst["state"] in TERMINAL or inst["stop_requested_at"] is not None:
        raise StateConflict(f"the workflow is {inst['state']}: it accepts no more signals")
    spec = step_specs(doc).get(req["target_step_key"])
    if spec is None or not decide.accepts(spec, *key):
        raise InvalidArgument(
            f"step {req['target_step_key']!r} does not wait for signal ({key[0]}, {key[1]})",
            field="target_step_key",
        )
    step = read_step(conn, instance_id, req["target_step_key"])
    assert step is not None  # every step of the document is read (a BLOCKED one from the document)
    current = step["activation_sequence"] or 0
    seq = req["target_activation_sequence"]
    where = decide.target(req["target_step_key"], seq, current)
    if isinstance(where, Refuse):
        raise StateConflict(where.message)
    count = run(conn, _Q_SIGNALS_SEND, {"id": instance_id}).scalar_one()
    if count >= signal_limit():
        raise LimitExceeded(
            "WORKFLOW_SIGNAL_LIMIT", f"the workflow already accepted {signal_limit()} signals (the limit)"
        )
    wait = read_wait(conn, step["activation_id"]) if where == decide.PENDING_NOW else None
    expires = (
        wait["deadline_at"] if wait is not None and wait["deadline_at"] is not None else inst["deadline_at"]
    )
    state, disposition = ("REJECTED", decide.STALE) if where == decide.STALE else ("PENDING", None)
    sig_id = new_id()
    signal_moves.insert(
        conn,
        {
            "id": sig_id,
            "ns": inst["namespace_id"],
            "inst": instance_id,
            "name": req["name"],
            "pv": req["payload_version"],
            "step": req["target_step_key"],
            "seq": seq,
            "corr": req["correlation_key"],
            "payload": req["payload"],
            "actor": actor_id,
            "reason": req["reason"],
            "evidence": req["evidence_ref"],
            "state": state,
            "disp": disposition,
            "expires": expires,
        },
    )
    if on_accepted is not None:
        on_accepted(conn, read_signal(conn, sig_id))
    if where == decide.PENDING_NOW:
        if signal_match.consume(conn, inst, step, read_signal(conn, sig_id)):
            driver.make_progress(conn, instance_id)
    elif where == decide.PENDING_EARLY:  # waits for the step's first activation, at most until expires_at
        jobs_and_tasks.wake(
            conn,
            inst,
            "signal_expiry",
            key=f"signal_expiry:{sig_id}",
            run_at=expires,
            step_key=req["target_step_key"],
            signal_id=sig_id,
        )
    return read_signal(conn, sig_id)


# --------------------------------------------------------------------------- reads
def get_signal(conn: Connection, instance_id: str, sig_id: str) -> dict:
    if not is_hex32(sig_id):
        raise NotFound("signal not found")
    sig = read_signal(conn, sig_id)
    if sig["instance_id"] != instance_id:
        raise NotFound("signal not found")
    return sig


def signal_view(sig: dict) -> dict:
    out: dict[str, Any] = {
        "id": sig["id"],
        "namespace_id": sig["namespace_id"],
        "workflow_id": sig["instance_id"],
        "revision": str(sig["revision"]),
        "name": sig["name"],
        "payload_version": sig["payload_version"],
        "target_step_key": sig["target_step_key"],
        "target_activation_sequence": sig["target_activation_sequence"],
        "correlation_key": sig["correlation_key"],
        "payload": None if sig["payload"] is MISSING else sig["payload"],
        "actor_id": sig["actor_id"],
        "state": sig["state"],
        "accepted_at": rfc3339(sig["accepted_at"]),
        "expires_at": rfc3339(sig["expires_at"]),
    }
    for k in ("evidence_ref", "disposition", "consumed_wait_id"):
        if sig[k]:
            out[k] = sig[k]
    return out


_Q_SIGNALS_LIST_SIGNALS = query(
    "signals_list_signals",
    f"SELECT {_COLS} FROM workflow_signals WHERE instance_id = :id "
    "AND (CAST(:at AS timestamptz) IS NULL OR (accepted_at, id) < (CAST(:at AS timestamptz), :aid)) "
    "ORDER BY accepted_at DESC, id DESC LIMIT :lim",
)


def list_signals(conn: Connection, inst: dict, limit: int, cursor: str | None) -> dict:
    binding = {"ns": inst["namespace_id"], "wf": inst["id"], "k": "workflow_signals"}
    params: dict[str, Any] = {"id": inst["id"], "lim": limit + 1, "at": None, "aid": None}
    if cursor:
        pos = cursors.decode(cursor, binding, t=cursors.TIME, i=cursors.TEXT)
        params.update(at=pos["t"], aid=pos["i"])
    rows = run(
        conn,
        _Q_SIGNALS_LIST_SIGNALS,
        params,
    ).all()
    items = [signal_row(r) for r in rows[:limit]]
    out: dict[str, Any] = {"items": [signal_view(s) for s in items]}
    if len(rows) > limit:
        out["next_cursor"] = cursors.encode(
            {"t": rfc3339(items[-1]["accepted_at"]), "i": items[-1]["id"]}, binding
        )
    return out
