"""The links of a rerun (issue 47), read for the views: the workflow an instance reruns and its own reruns
(``workflow_reruns``), and the copied steps of a rerun (``workflow_steps.copied_from``). Written by
``app.engine.rerun``; read here, below the commands, so that the step views can show them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.jsonx import rfc3339
from app.sql import query, run

MAX_LINKS = 20  # the newest reruns a view lists


_RERUN_LINKS_READ = query(
    "rerun_links_read",
    "(SELECT 'of' AS dir, rerun_of AS other, from_step, reason, actor_id, copied_steps, created_at "
    " FROM workflow_reruns WHERE instance_id = :i) UNION ALL "
    "(SELECT 'by', instance_id, from_step, reason, actor_id, copied_steps, created_at "
    " FROM workflow_reruns WHERE rerun_of = :i ORDER BY created_at DESC LIMIT :n)",
)


def links(conn: Connection, instance_id: str) -> dict[str, Any]:
    """The rerun links of an instance, for its views: ``rerun_of`` (the workflow it reruns, with the step
    and reason) and ``reruns`` (its newest ``MAX_LINKS`` reruns); absent keys when there are none."""
    rows = run(
        conn,
        _RERUN_LINKS_READ,
        {"i": instance_id, "n": MAX_LINKS},
    ).all()
    out: dict[str, Any] = {}
    for r in rows:
        item = {
            "id": r.other,
            "from_step": r.from_step,
            "reason": r.reason,
            "actor_id": r.actor_id,
            "copied_steps": list(r.copied_steps),
            "created_at": rfc3339(r.created_at),
        }
        if r.dir == "of":
            out["rerun_of"] = item
        else:
            out.setdefault("reruns", []).append(item)
    return out


_RERUN_COPIED_STEPS = query(
    "rerun_copied_steps",
    "SELECT key, copied_from FROM workflow_steps WHERE instance_id = :i AND copied_from IS NOT NULL",
)


def copied_marks(conn: Connection, instance_id: str) -> dict[str, str]:
    """The copied steps of a rerun by key: the instance whose output each one copied ({} for any other)."""
    rows = run(
        conn,
        _RERUN_COPIED_STEPS,
        {"i": instance_id},
    ).all()
    return {r.key: r.copied_from for r in rows}
