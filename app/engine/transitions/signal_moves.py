"""Every write of ``workflow_signals.state`` (W-SIG): a signal is inserted PENDING (or REJECTED as
STALE_ACTIVATION) and leaves PENDING exactly once: CONSUMED / REJECTED by ``settle``, EXPIRED, or
REJECTED (WORKFLOW_ENDED) when its instance ends. Each move returns the rows it moved (for the audit)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine import events
from app.engine.row_access import jdump
from app.engine.states import SignalState
from app.engine.transitions._guard import many
from app.sql import query, run

S = SignalState
_SETTLED = "RETURNING id, namespace_id, instance_id, state, disposition, consumed_wait_id, revision"
_BUMP = "resolved_at = now(), revision = revision + 1, updated_at = now()"


_Q_SIGNAL_INSERT = query(
    "signal_insert",
    """
INSERT INTO workflow_signals (id, namespace_id, instance_id, name, payload_version, target_step_key,
    target_activation_sequence, correlation_key, payload, actor_id, reason, evidence_ref, state, disposition,
    expires_at, resolved_at)
VALUES (:id, :ns, :inst, :name, :pv, :step, :seq, :corr, CAST(:payload AS jsonb), :actor, :reason, :evidence,
    :state, :disp, :expires, CASE WHEN :state = 'PENDING' THEN NULL ELSE now() END)
""",
)


def insert(conn: Connection, row: dict[str, Any]) -> None:
    run(
        conn,
        _Q_SIGNAL_INSERT,
        {**row, "payload": jdump(row["payload"])},
    )
    events.emit(
        conn,
        row["inst"],
        "signal.accepted" if row["state"] == S.PENDING else "signal.rejected",
        signal_id=row["id"],
        name=row["name"],
        disposition=row["disp"],
        step_key=row["step"],
    )


def _events(conn: Connection, rows: list[Any]) -> list[Any]:
    for r in rows:
        events.emit(
            conn,
            r.instance_id,
            f"signal.{str(r.state).lower()}",
            signal_id=r.id,
            disposition=r.disposition,
            wait_id=r.consumed_wait_id,
        )
    return rows


_Q_SIGNAL_DISPOSE = query(
    "signal_dispose",
    f"UPDATE workflow_signals SET state = :s, disposition = :d, consumed_wait_id = :w, {_BUMP} "
    f"WHERE id = :id AND state = 'PENDING' {_SETTLED}",
)


def dispose(
    conn: Connection, sig_id: str, state: str, disposition: str | None, wait_id: str | None
) -> list[Any]:
    """PENDING -> CONSUMED (by ``wait_id``) or REJECTED (``disposition``)."""
    return _events(
        conn,
        many(
            conn,
            _Q_SIGNAL_DISPOSE,
            {"id": sig_id, "s": state, "d": disposition, "w": wait_id},
        ),
    )


_Q_SIGNAL_TRY_EXPIRE = query(
    "signal_try_expire",
    f"UPDATE workflow_signals SET state = 'EXPIRED', {_BUMP} "
    f"WHERE id = :id AND instance_id = :inst AND state = 'PENDING' AND expires_at <= now() {_SETTLED}",
)


def try_expire(conn: Connection, sig_id: str, instance_id: str) -> list[Any]:
    """PENDING at ``expires_at`` -> EXPIRED."""
    return _events(
        conn,
        many(
            conn,
            _Q_SIGNAL_TRY_EXPIRE,
            {"id": sig_id, "inst": instance_id},
        ),
    )


_Q_SIGNAL_CLOSE_PENDING = query(
    "signal_close_pending",
    f"UPDATE workflow_signals SET state = 'REJECTED', disposition = 'WORKFLOW_ENDED', {_BUMP} "
    f"WHERE instance_id = :id AND state = 'PENDING' {_SETTLED}",
)


def close_pending(conn: Connection, instance_id: str) -> list[Any]:
    """The instance ended: PENDING signals can never be consumed -> REJECTED (WORKFLOW_ENDED)."""
    return _events(
        conn,
        many(
            conn,
            _Q_SIGNAL_CLOSE_PENDING,
            {"id": instance_id},
        ),
    )
