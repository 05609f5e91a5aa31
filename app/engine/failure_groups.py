"""Failure groups of workflows (issue 47): the FAILED and NEEDS_REVIEW workflows of a namespace grouped by
definition, failing step, error code and normalised message (the ledger's normaliser:
``finding.ERROR_GROUP_SQL``), largest first, each with its counts, first and last seen, samples, the list
filter that selects its members (``GET /v1/workflows?...``) and the batch filter that reruns its FAILED
members. Read through ``ix_workflow_instances_failed``; at most ``MAX_GROUPS`` groups per answer."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine.finding import ERROR_GROUP_SQL
from app.jsonx import rfc3339
from app.sql import run

MAX_GROUPS = 100

_GROUPS = f"""
SELECT i.definition_id, min(d.name) AS definition_name, i.error->>'step_key' AS step_key,
       i.error->>'code' AS code, {ERROR_GROUP_SQL} AS message_group, count(*) AS count,
       count(*) FILTER (WHERE i.state = 'FAILED') AS failed,
       count(*) FILTER (WHERE i.state = 'NEEDS_REVIEW') AS needs_review,
       min(COALESCE(i.completed_at, i.updated_at)) AS first_seen,
       max(COALESCE(i.completed_at, i.updated_at)) AS last_seen,
       (array_agg(DISTINCT i.error->>'message'))[1:3] AS sample_messages,
       (array_agg(i.id ORDER BY i.updated_at DESC, i.id DESC))[1:5] AS sample_ids,
       count(*) OVER () AS group_count
FROM workflow_instances i JOIN workflow_definitions d ON d.id = i.definition_id
WHERE i.namespace_id = :ns AND i.state IN ('FAILED', 'NEEDS_REVIEW')
  AND (CAST(:def AS text) IS NULL OR i.definition_id = :def)
  AND (CAST(:allowed AS text[]) IS NULL OR i.queues <@ CAST(:allowed AS text[]))
GROUP BY i.definition_id, 3, 4, 5
ORDER BY count(*) DESC, max(COALESCE(i.completed_at, i.updated_at)) DESC
LIMIT :lim
"""


def groups(
    conn: Connection,
    namespace_id: str,
    allowed_queues: tuple[str, ...] | None,
    *,
    definition_id: str | None = None,
    limit: int = 20,
) -> dict[str, Any]:
    rows = run(
        conn,
        _GROUPS,
        {
            "ns": namespace_id,
            "def": definition_id,
            "allowed": list(allowed_queues) if allowed_queues is not None else None,
            "lim": max(1, min(limit, MAX_GROUPS)),
        },
    ).all()
    out = []
    for r in rows:
        f: dict[str, str] = {"definition_id": r.definition_id}
        if r.step_key is not None:
            f["failed_step"] = r.step_key
        if r.code is not None:
            f["error_code"] = r.code
        if r.message_group:
            f["error_group"] = r.message_group
        out.append(
            {
                "definition_id": r.definition_id,
                "definition_name": r.definition_name,
                "step_key": r.step_key,
                "error_code": r.code,
                "message_group": r.message_group,
                "count": int(r.count),
                "failed": int(r.failed),
                "needs_review": int(r.needs_review),
                "first_seen": rfc3339(r.first_seen),
                "last_seen": rfc3339(r.last_seen),
                "sample_messages": [m for m in (r.sample_messages or []) if m is not None],
                "sample_ids": list(r.sample_ids),
                "filter": f,
                "rerun_filter": {**f, "state": "FAILED"},
            }
        )
    return {"groups": out, "group_count": int(rows[0].group_count) if rows else 0}
