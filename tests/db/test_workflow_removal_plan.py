"""The removal of finished workflows (``app.engine.retention.REMOVE_FINISHED_WORKFLOWS``) looks up each
candidate's unfinished jobs by its id (``ix_workflow_jobs_instance``), whatever the sizes of the tables:
with many candidates the planner, which cannot tell the finished jobs from the others, turned the
``NOT EXISTS`` into an anti-join over every job of the table, read once per batch (a sequential scan of
``workflow_jobs``: 42 ms and 6,800 pages a batch at 200,000 jobs, growing with the table; ``bench.retention``).

A database of its own (``scratch``): the test fills the tables with finished workflows."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from app.engine.retention import REMOVE_FINISHED_WORKFLOWS, WorkflowRetention
from app.migrate import upgrade
from tests.engine.helpers import publish, start

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [{"key": "t", "kind": "TASK", "queue": "q"}],
}


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for p in plan.get("Plans", []) for n in _nodes(p))]


def test_the_removal_reads_the_jobs_of_its_candidates_by_index(scratch):
    url, eng = scratch
    upgrade(url)
    with eng.begin() as conn:
        conn.execute(text("INSERT INTO namespaces (id, name) VALUES ('ns-plan', 'ns-plan')"))
    wid = start(eng, "ns-plan", publish(eng, "ns-plan", DOC), {})["id"]
    with eng.begin() as conn:
        # 20,000 workflows that ended 40 days ago, each with two finished jobs
        conn.execute(
            text(
                "INSERT INTO workflow_instances (id, namespace_id, definition_id, definition_version_id, version, "
                "state, input, queues, deadline_at, trace_id, created_at, completed_at) "
                "SELECT md5(g::text), namespace_id, definition_id, definition_version_id, version, 'SUCCEEDED', "
                "input, queues, deadline_at, trace_id, now() - interval '41 days', now() - interval '40 days' "
                "FROM workflow_instances, generate_series(1, 20000) g WHERE id = :w"
            ),
            {"w": wid},
        )
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, max_attempts, operation_key, trace_id, status, finished_at, "
                "instance_id) SELECT 'delay_wake', 'workflow-ledger', 3, 'op', 'tr', 'succeeded', now(), "
                "md5((g / 2)::text) FROM generate_series(2, 40001) g"
            )
        )
        conn.execute(text("ANALYZE workflow_jobs"))
        conn.execute(text("ANALYZE workflow_instances"))
    params = {**WorkflowRetention(days=30.0).params(), "limit": 5000}
    with eng.connect() as conn:
        plan = conn.execute(
            text("EXPLAIN (FORMAT JSON) " + REMOVE_FINISHED_WORKFLOWS.text), params
        ).scalar_one()
        removed = conn.execute(text(REMOVE_FINISHED_WORKFLOWS.text), params).scalar_one()
        conn.rollback()
    nodes = _nodes(plan[0]["Plan"])
    jobs = [n["Node Type"] for n in nodes if n.get("Relation Name") == "workflow_jobs"]
    assert jobs and "Seq Scan" not in jobs, jobs
    assert any(n.get("Index Name") == "ix_workflow_jobs_instance" for n in nodes)
    assert removed == 5000
