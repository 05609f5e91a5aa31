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

import os
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, text

from app.engine import oplog
from app.engine.documents import KEY_RE, NAME_RE, PAYLOAD_VERSION_RE, input_errors
from app.engine.store import (
    MISSING,
    TERMINAL,
    jdump,
    jparse,
    lock_instance,
    read_step,
    read_wait,
    step_specs,
    version_document,
)
from app.errors import FieldError, InvalidArgument, LimitExceeded, NotFound, StateConflict
from app.ids import is_hex32, new_id
from app.jsonx import rfc3339
from app.ledger.enqueue import enqueue

SIGNAL_FIELDS = {
    "name",
    "payload_version",
    "target_step_key",
    "target_activation_sequence",
    "correlation_key",
    "payload",
    "reason",
    "evidence_ref",
}
MAX_CORRELATION_BYTES = 512


def signal_limit() -> int:
    """W-SIG-3: accepted signals per instance over its whole life (lowered by tests)."""
    raw = os.environ.get("LEDGERFLOW_SIGNAL_LIMIT")
    return int(raw) if raw else 1024


def validate_signal(body: Any) -> dict:
    from app.engine import fields

    if not isinstance(body, dict):
        raise InvalidArgument("the request body must be a JSON object", field="$")
    errors: list[FieldError] = fields.unknown(body, SIGNAL_FIELDS)
    for name, rx, rule in (
        ("name", NAME_RE, "1-128 ASCII name characters"),
        ("payload_version", PAYLOAD_VERSION_RE, "1-32 ASCII name characters"),
        ("target_step_key", KEY_RE, "1-64 ASCII name characters"),
    ):
        v = body.get(name)
        if name not in body:
            errors.append(FieldError(name, f"required: {rule}"))
        elif not isinstance(v, str) or not rx.match(v):
            errors.append(FieldError(name, rule))
    seq = body.get("target_activation_sequence")
    if "target_activation_sequence" not in body:
        errors.append(FieldError("target_activation_sequence", "required: a non-zero uint32"))
    elif not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= fields.UINT32_MAX:
        errors.append(FieldError("target_activation_sequence", "a non-zero uint32 integer"))
    corr = body.get("correlation_key")
    if "correlation_key" not in body:
        errors.append(FieldError("correlation_key", "required: 1-512 bytes of UTF-8"))
    elif (
        not isinstance(corr, str)
        or not fields.encodable(corr)
        or not 1 <= len(corr.encode("utf-8")) <= MAX_CORRELATION_BYTES
    ):
        errors.append(FieldError("correlation_key", "1-512 bytes of UTF-8, no NUL"))
    payload = fields.json_value(errors, body, "payload")
    reason = fields.reason(errors, body)
    evidence = fields.evidence_ref(errors, body)
    if errors:
        raise InvalidArgument(errors=errors)
    return {
        "name": body["name"],
        "payload_version": body["payload_version"],
        "target_step_key": body["target_step_key"],
        "target_activation_sequence": seq,
        "correlation_key": corr,
        "payload": payload,
        "reason": reason,
        "evidence_ref": evidence,
    }


def _accepts(spec: dict, name: str, pv: str) -> bool:
    if spec["kind"] == "SIGNAL":
        return (spec["signal"], spec["payload_version"]) == (name, pv)
    fs = spec.get("final_signal") if spec["kind"] == "POLL" else None
    return bool(fs) and (fs["signal"], fs["payload_version"]) == (name, pv)


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
    inst = lock_instance(conn, instance_id)
    if inst["state"] in TERMINAL or inst["stop_requested_at"] is not None:
        raise StateConflict(f"the workflow is {inst['state']}: it accepts no more signals")
    doc = version_document(conn, inst["definition_version_id"])
    contracts = {(s["name"], s["payload_version"]): s.get("schema", {}) for s in doc.get("signals", [])}
    key = (req["name"], req["payload_version"])
    if key not in contracts:
        raise InvalidArgument(
            f"the pinned version declares no signal contract ({key[0]}, {key[1]})", field="name"
        )
    errors = input_errors(contracts[key], req["payload"], prefix="payload")
    if errors:
        raise InvalidArgument("payload does not satisfy the pinned signal contract", errors=errors)
    spec = step_specs(doc).get(req["target_step_key"])
    if spec is None or not _accepts(spec, *key):
        raise InvalidArgument(
            f"step {req['target_step_key']!r} does not wait for signal ({key[0]}, {key[1]})",
            field="target_step_key",
        )
    step = read_step(conn, instance_id, req["target_step_key"])
    current = step["activation_sequence"] or 0
    seq = req["target_activation_sequence"]
    if seq > max(current, 1):
        raise StateConflict(
            f"activation {seq} of step {req['target_step_key']!r} does not exist (current: {current}); "
            "read activation_sequence from the step"
        )
    count = conn.execute(
        text("SELECT count(*) FROM workflow_signals WHERE instance_id = :id"), {"id": instance_id}
    ).scalar_one()
    if count >= signal_limit():
        raise LimitExceeded(
            "WORKFLOW_SIGNAL_LIMIT", f"the workflow already accepted {signal_limit()} signals (the limit)"
        )
    wait = read_wait(conn, step["activation_id"]) if current and seq == current else None
    expires = (
        wait["deadline_at"] if wait is not None and wait["deadline_at"] is not None else inst["deadline_at"]
    )
    state, disposition = ("REJECTED", "STALE_ACTIVATION") if seq < current else ("PENDING", None)
    sig_id = new_id()
    conn.execute(
        text(
            """
INSERT INTO workflow_signals (id, namespace_id, instance_id, name, payload_version, target_step_key,
    target_activation_sequence, correlation_key, payload, actor_id, reason, evidence_ref, state, disposition,
    expires_at, resolved_at)
VALUES (:id, :ns, :inst, :name, :pv, :step, :seq, :corr, CAST(:payload AS jsonb), :actor, :reason, :evidence,
    :state, :disp, :expires, CASE WHEN :state = 'PENDING' THEN NULL ELSE now() END)
"""
        ),
        {
            "id": sig_id,
            "ns": inst["namespace_id"],
            "inst": instance_id,
            "name": req["name"],
            "pv": req["payload_version"],
            "step": req["target_step_key"],
            "seq": seq,
            "corr": req["correlation_key"],
            "payload": jdump(req["payload"]),
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
    if state == "PENDING" and current and seq == current:
        if consume(conn, inst, step, read_signal(conn, sig_id)):
            from app.engine import steps

            steps.after_change(conn, instance_id)
    elif state == "PENDING":  # early: waits for the step's first activation, at most until expires_at
        enqueue(
            conn,
            "delay_wake",
            {"wake": "signal_expiry", "signal_id": sig_id},
            instance_id=instance_id,
            step_key=req["target_step_key"],
            run_at=expires,
            idempotency_key=f"delay_wake:signal_expiry:{sig_id}",
            trace_id=inst["trace_id"],
        )
    return read_signal(conn, sig_id)


_SETTLED = "RETURNING id, namespace_id, instance_id, state, disposition, consumed_wait_id, revision"


def _audit_settled(conn: Connection, rows: Any) -> None:
    """Signal-resource audit (X-HIST): one engine row per state change of a signal."""
    for r in rows:
        after = {"state": r.state, "revision": str(r.revision)}
        if r.disposition:
            after["disposition"] = r.disposition
        if r.consumed_wait_id:
            after["consumed_wait_id"] = r.consumed_wait_id
        oplog.advance(
            conn,
            {"id": r.instance_id, "namespace_id": r.namespace_id},
            f"signal.{r.state.lower()}",
            target_type="signal",
            target_id=r.id,
            before={"state": "PENDING"},
            after=after,
        )


def _settle_signal(
    conn: Connection, sig_id: str, state: str, disposition: str | None, wait_id: str | None
) -> None:
    rows = conn.execute(
        text(
            "UPDATE workflow_signals SET state = :s, disposition = :d, consumed_wait_id = :w, resolved_at = now(), "
            f"revision = revision + 1, updated_at = now() WHERE id = :id AND state = 'PENDING' {_SETTLED}"
        ),
        {"id": sig_id, "s": state, "d": disposition, "w": wait_id},
    ).all()
    _audit_settled(conn, rows)


def consume(conn: Connection, inst: dict, step: dict, sig: dict) -> bool:
    """Offer a PENDING signal to the wait of its activation (the current one). True when it won and
    the step succeeded; the caller then runs ``steps.after_change``."""
    wait = read_wait(conn, step["activation_id"]) if step["activation_id"] else None
    if (
        wait is None
        or wait["kind"] != "SIGNAL"
        or wait["state"] != "WAITING"
        or step["state"]
        not in (
            "ACTIVE",
            "WAITING",
        )
    ):
        _settle_signal(conn, sig["id"], "REJECTED", "WAIT_CLOSED", None)
        return False
    if (wait["name"], wait["payload_version"]) != (sig["name"], sig["payload_version"]):
        _settle_signal(conn, sig["id"], "REJECTED", "CONTRACT_MISMATCH", None)
        return False
    if wait["correlation_key"] is not None and wait["correlation_key"] != sig["correlation_key"]:
        _settle_signal(conn, sig["id"], "REJECTED", "CORRELATION_MISMATCH", None)
        return False
    conn.execute(
        text(
            "UPDATE workflow_waits SET state = 'RESOLVED', winner_signal_id = :s, resolved_at = now() "
            "WHERE id = :w AND state = 'WAITING'"
        ),
        {"w": wait["id"], "s": sig["id"]},
    )
    _settle_signal(conn, sig["id"], "CONSUMED", None, wait["id"])
    act = step["activation_id"]
    if step["kind"] == "POLL":  # the signal wins: queued rounds stop, an in-flight one may still end
        conn.execute(
            text(
                "UPDATE workflow_tasks SET state = 'CANCELLED', updated_at = now(), completed_at = now() "
                "WHERE activation_id = :a AND state = 'PENDING'"
            ),
            {"a": act},
        )
        conn.execute(
            text(
                "UPDATE workflow_activations SET poll_resolved_at = now(), poll_next_at = NULL, "
                "poll_current_task_id = NULL WHERE id = :a"
            ),
            {"a": act},
        )
    conn.execute(
        text(
            "UPDATE workflow_activations SET state = 'SUCCEEDED', output = CAST(:o AS jsonb), completed_at = now() "
            "WHERE id = :a"
        ),
        {"a": act, "o": jdump(sig["payload"])},
    )
    conn.execute(
        text(
            "UPDATE workflow_steps SET state = 'SUCCEEDED', revision = revision + 1, updated_at = now() WHERE id = :id"
        ),
        {"id": step["id"]},
    )
    oplog.advance(
        conn,
        inst,
        "workflow.step.succeeded",
        target_type="step",
        target_id=step["key"],
        after={"step_key": step["key"], "signal_id": sig["id"], "wait_id": wait["id"]},
    )
    return True


def consume_early(conn: Connection, inst: dict, keys: list[str]) -> bool:
    """Steps that just activated take their earliest matching PENDING signal (W-SIG-4)."""
    won = False
    for key in keys:
        step = read_step(conn, inst["id"], key)
        if step is None or not step["activation_id"]:
            continue
        pending = conn.execute(
            text(
                "SELECT id FROM workflow_signals WHERE instance_id = :i AND target_step_key = :k "
                "AND target_activation_sequence = :s AND state = 'PENDING' ORDER BY accepted_at, id"
            ),
            {"i": inst["id"], "k": key, "s": step["activation_sequence"]},
        ).all()
        for (sig_id,) in pending:
            if consume(conn, inst, step, read_signal(conn, sig_id)):
                won = True
                step = read_step(conn, inst["id"], key)
    return won


def expire(conn: Connection, sig_id: str) -> bool:
    """The ``signal_expiry`` wake: still PENDING at expires_at → EXPIRED."""
    rows = conn.execute(
        text(
            "UPDATE workflow_signals SET state = 'EXPIRED', resolved_at = now(), revision = revision + 1, "
            f"updated_at = now() WHERE id = :id AND state = 'PENDING' AND expires_at <= now() {_SETTLED}"
        ),
        {"id": sig_id},
    ).all()
    _audit_settled(conn, rows)
    return bool(rows)


def close_pending(conn: Connection, instance_id: str) -> None:
    """The instance finished: signals still pending can never be consumed."""
    rows = conn.execute(
        text(
            "UPDATE workflow_signals SET state = 'REJECTED', disposition = 'WORKFLOW_ENDED', resolved_at = now(), "
            f"revision = revision + 1, updated_at = now() WHERE instance_id = :id AND state = 'PENDING' {_SETTLED}"
        ),
        {"id": instance_id},
    ).all()
    _audit_settled(conn, rows)


# --------------------------------------------------------------------------- reads
_COLS = """id, namespace_id, instance_id, revision, name, payload_version, target_step_key,
    target_activation_sequence, correlation_key, payload::text AS payload, actor_id, reason, evidence_ref, state,
    disposition, consumed_wait_id, accepted_at, expires_at, resolved_at"""


def _row(r: Any) -> dict:
    d = dict(r._mapping)
    d["payload"] = jparse(d["payload"])
    return d


def read_signal(conn: Connection, sig_id: str) -> dict:
    r = conn.execute(text(f"SELECT {_COLS} FROM workflow_signals WHERE id = :id"), {"id": sig_id}).first()
    if r is None:
        raise NotFound("signal not found")
    return _row(r)


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


def list_signals(conn: Connection, inst: dict, limit: int, cursor: str | None) -> dict:
    from app import cursor as cursors

    binding = {"ns": inst["namespace_id"], "wf": inst["id"], "k": "workflow_signals"}
    params: dict[str, Any] = {"id": inst["id"], "lim": limit + 1, "at": None, "aid": None}
    if cursor:
        pos = cursors.decode(cursor, binding)
        params.update(at=cursors.parse_time(pos["t"]), aid=str(pos["i"]))
    rows = conn.execute(
        text(
            f"SELECT {_COLS} FROM workflow_signals WHERE instance_id = :id "
            "AND (CAST(:at AS timestamptz) IS NULL OR (accepted_at, id) < (CAST(:at AS timestamptz), :aid)) "
            "ORDER BY accepted_at DESC, id DESC LIMIT :lim"
        ),
        params,
    ).all()
    items = [_row(r) for r in rows[:limit]]
    out: dict[str, Any] = {"items": [signal_view(s) for s in items]}
    if len(rows) > limit:
        out["next_cursor"] = cursors.encode(
            {"t": rfc3339(items[-1]["accepted_at"]), "i": items[-1]["id"]}, binding
        )
    return out
