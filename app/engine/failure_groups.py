"""Failure groups of workflows (issue 47): the FAILED and NEEDS_REVIEW workflows of a namespace grouped by
definition, failing step, error code and normalised message (the ledger's normaliser; the
generated columns ``fail_step``, ``fail_code``, ``fail_group``, migration 0026), largest first, each with its counts, first and last seen (when its workflows
ended; a workflow in review has not ended), samples, the list filter that selects its members (``GET
/v1/workflows?...``) and the batch filter that reruns its FAILED members. The groups are counted from
``ix_workflow_instances_failed`` alone (its keys are the groups' own: an index-only scan, migrations 0026 and
0034: ``fail_state`` is the state while FAILED or NEEDS_REVIEW, so that no index reads ``state``);
the samples of the groups shown are read through it afterwards. At most ``MAX_GROUPS`` groups an answer."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.jsonx import rfc3339
from app.sql import query, run

MAX_GROUPS = 100
SAMPLES = 3

_GROUPS_SQL = """
SELECT g.*, d.name AS definition_name, count(*) OVER () AS group_count FROM (
    SELECT definition_id, fail_step AS step_key, fail_code AS code, fail_group AS message_group, count(*) AS count,
           count(*) FILTER (WHERE fail_state = 'FAILED') AS failed,
           count(*) FILTER (WHERE fail_state = 'NEEDS_REVIEW') AS needs_review,
           min(completed_at) AS first_seen, max(completed_at) AS last_seen
    FROM workflow_instances
    WHERE namespace_id = :ns AND fail_state IS NOT NULL
      AND (CAST(:def AS text) IS NULL OR definition_id = :def){scope}
    GROUP BY 1, 2, 3, 4
) g JOIN workflow_definitions d ON d.id = g.definition_id
ORDER BY g.count DESC, g.last_seen DESC NULLS LAST
LIMIT :lim
"""
# every credential of the namespace: counted from the index alone; one limited to some queues: its queues'
# workflows only (the rows are read)
_GROUPS = query("failure_groups", _GROUPS_SQL.format(scope=""))
_GROUPS_SCOPED = query(
    "failure_groups_scoped", _GROUPS_SQL.format(scope="\n      AND queues <@ CAST(:allowed AS text[])")
)
# the newest members of one group: its keys (a NULL step or code as NULL), read backwards along
# ix_workflow_instances_failed (in review first, then the latest ended), the first few only
_SAMPLES_SQL = """
SELECT id, error->>'message' AS message FROM workflow_instances
WHERE namespace_id = :ns AND fail_state IS NOT NULL AND definition_id = :def
  AND {step} AND {code} AND fail_group = :grp
  AND (CAST(:allowed AS text[]) IS NULL OR queues <@ CAST(:allowed AS text[]))
ORDER BY fail_state DESC, completed_at DESC NULLS FIRST LIMIT :n
"""


# one statement per (step, code) NULL-ness: ``IS NULL`` and ``= :x`` each keep to the index
_SAMPLES = {
    (step_null, code_null): query(
        f"failure_group_samples{'_no_step' if step_null else ''}{'_no_code' if code_null else ''}",
        _SAMPLES_SQL.format(
            step="fail_step IS NULL" if step_null else "fail_step = :step",
            code="fail_code IS NULL" if code_null else "fail_code = :code",
        ),
    )
    for step_null in (False, True)
    for code_null in (False, True)
}


def groups(
    conn: Connection,
    namespace_id: str,
    allowed_queues: tuple[str, ...] | None,
    *,
    definition_id: str | None = None,
    limit: int = 20,
) -> dict[str, Any]:
    """The groups of the workflows the credential may read (``allowed_queues``: its queue scope)."""
    allowed = list(allowed_queues) if allowed_queues is not None else None
    rows = run(
        conn,
        _GROUPS if allowed is None else _GROUPS_SCOPED,
        {"ns": namespace_id, "def": definition_id, "lim": max(1, min(limit, MAX_GROUPS)), "allowed": allowed},
    ).all()
    out = []
    for r in rows:
        samples = run(
            conn,
            _SAMPLES[r.step_key is None, r.code is None],
            {
                "ns": namespace_id,
                "def": r.definition_id,
                "step": r.step_key,
                "code": r.code,
                "grp": r.message_group,
                "allowed": allowed,
                "n": SAMPLES,
            },
        ).all()
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
                "first_seen": rfc3339(r.first_seen) if r.first_seen else None,
                "last_seen": rfc3339(r.last_seen) if r.last_seen else None,
                "sample_messages": list(dict.fromkeys(s.message for s in samples if s.message is not None)),
                "sample_ids": [s.id for s in samples],
                "filter": f,
                "rerun_filter": {**f, "state": "FAILED"},
            }
        )
    return {"groups": out, "group_count": int(rows[0].group_count) if rows else 0}
