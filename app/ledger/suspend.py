"""Suspend / resume / clear an instance's jobs (L-PAUSE-1..4). Called by the workflow engine inside
its own transaction (after it locked the instance: instance first, then jobs)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.ledger import transitions
from app.ledger.hints import publish_after_commit
from app.ledger.states import CLEAR_SCOPE, SUSPEND_SCOPE


def suspend_jobs(conn: Connection, instance_id: str) -> list[dict[str, Any]]:
    """Pause the instance's delay/timeout/trigger/external/subprocess jobs, saving the remaining
    milliseconds; a running one with an open side-effect marker goes to the dead letter."""
    return transitions.suspend_instance(conn, instance_id, sorted(SUSPEND_SCOPE))


def resume_jobs(conn: Connection, instance_id: str) -> list[dict[str, Any]]:
    """Reschedule paused jobs with exactly their saved remainder; hints go out after commit."""
    rows = transitions.resume_instance(conn, instance_id)
    publish_after_commit(conn, {r["queue"] for r in rows})
    return rows


def clear_jobs(
    conn: Connection, instance_id: str, reason: str = "instance ended", *, keep_unknown: bool = False
) -> list[dict[str, Any]]:
    """Cancel the clear-scope jobs of a terminated / returned / withdrawn / canceled instance
    (``keep_unknown``: jobs with an unknown external outcome stay for the operator)."""
    return transitions.clear_instance(
        conn, instance_id, sorted(CLEAR_SCOPE), reason, keep_unknown=keep_unknown
    )
