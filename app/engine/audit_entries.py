"""Operation audit of a workflow (W-AUDIT-3): start, engine advances, control and recovery.

Engine advances have no caller: they are recorded with the system actor ``system:engine``. The engine's
entries and a start's ``workflow.start`` entry are written with the transaction's event batch
(``app.engine.events``); an operator's decisions are ``operation_audit`` rows (``app.audit``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app import audit
from app.auth import Principal
from app.engine import events
from app.ids import new_id

SYSTEM_ACTOR = "system:engine"


def system_principal(namespace_id: str) -> Principal:
    return Principal(
        credential_id=SYSTEM_ACTOR,
        name="ledgerflow engine",
        namespace_id=namespace_id,
        namespace="",
        scopes=frozenset(),
        queues=None,
    )


def advance(
    conn: Connection,
    inst: dict,
    action: str,
    *,
    target_type: str = "workflow",
    target_id: str | None = None,
    before: Any = None,
    after: Any = None,
) -> None:
    """One audit entry for an engine advance (step settled, instance finished, compensation issued),
    by ``system:engine``: written with the transaction's event batch (``events.audit_engine``)."""
    events.audit_engine(
        conn,
        inst["id"],
        action,
        target_type=target_type,
        target_id=target_id or inst["id"],
        operation_id=new_id(),
        before=before,
        after=after,
    )


def operation(
    conn: Connection,
    principal: Principal,
    inst_id: str,
    action: str,
    *,
    request_id: str | None,
    reason: str | None,
    evidence_ref: str | None = None,
    before: Any = None,
    after: Any = None,
    target_type: str = "workflow",
    target_id: str | None = None,
) -> str:
    """One audit row for an operator's decision (control, recovery)."""
    return audit.record(
        conn,
        principal=principal,
        request_id=request_id,
        action=action,
        target_type=target_type,
        target_id=target_id or inst_id,
        workflow_id=inst_id,
        operation_id=new_id(),
        reason=reason,
        evidence_ref=evidence_ref,
        before=before,
        after=after,
    )


def started(
    conn: Connection, principal: Principal, instance_id: str, view: dict, *, request_id: str | None
) -> None:
    """The ``workflow.start`` entry of a start by ``principal`` (``after``: the instance as inserted,
    ``view``), written with the start's event batch, before the engine's entries of its first
    activations (``events.audit_by``): a start writes no ``operation_audit`` row."""
    events.audit_by(
        conn,
        instance_id,
        "workflow.start",
        actor_id=principal.actor_id,
        actor_name=principal.name,
        request_id=request_id,
        target_type="workflow",
        target_id=instance_id,
        after=view,
    )
