"""Find by what operators see (issue 47): the list's id-prefix and business-key-prefix filters are range
scans (of the primary key, of the index of migration 0026), not scans of the namespace's workflows (EXPLAIN on 20,000 rows)."""

from __future__ import annotations

import json
import uuid

from sqlalchemy import text

from app.engine import instances
from app.sql import run

N = 20_000


def _plan(conn, filters: dict) -> str:
    statement, params = instances.newest_sql("ns-find", filters, None, 21)
    rows = conn.execute(text("EXPLAIN (FORMAT JSON) " + statement.text), params).scalar_one()
    return json.dumps(rows)


def _seed(conn) -> str:
    def_id, ver_id = uuid.uuid4().hex, uuid.uuid4().hex
    conn.execute(
        text("INSERT INTO workflow_definitions (id, namespace_id, name) VALUES (:d, 'ns-find', :n)"),
        {"d": def_id, "n": "find-" + def_id[:6]},
    )
    conn.execute(
        text(
            "INSERT INTO workflow_definition_versions (id, definition_id, namespace_id, version, document, queues) "
            "VALUES (:v, :d, 'ns-find', 'v1', '{}'::jsonb, '{}')"
        ),
        {"v": ver_id, "d": def_id},
    )
    conn.execute(
        text(
            """
INSERT INTO workflow_instances (id, namespace_id, definition_id, definition_version_id, version, state, input,
    business_key, queues, deadline_at, trace_id, created_at, completed_at)
SELECT md5(g::text || :salt), 'ns-find', :d, :v, 'v1', 'FAILED', '{}'::jsonb, 'Order-' || g, '{}',
    now() + interval '1 day', md5(g::text), now() - g * interval '1 second', now()
FROM generate_series(1, :n) g"""
        ),
        {"d": def_id, "v": ver_id, "n": N, "salt": def_id},
    )
    conn.execute(text("ANALYZE workflow_instances"))
    return conn.execute(
        text("SELECT id FROM workflow_instances WHERE business_key = 'Order-777'")
    ).scalar_one()


def test_prefix_searches_use_their_indexes(engine):
    with engine.connect() as conn:
        tx = conn.begin()
        try:
            some_id = _seed(conn)
            plan = _plan(conn, {"id_prefix": some_id[:8]})
            assert "workflow_instances_pkey" in plan and "Seq Scan" not in plan, plan
            plan = _plan(conn, {"business_key_prefix": "ORDER-7771"})
            assert "ix_workflow_instances_key_lower" in plan, plan
            # and they find: an 8-character id prefix, a key prefix in another case
            statement, params = instances.newest_sql("ns-find", {"id_prefix": some_id[:8].upper()}, None, 21)
            assert list(run(conn, statement, params).scalars()) == [some_id]
            statement, params = instances.newest_sql(
                "ns-find", {"business_key_prefix": "oRDER-777"}, None, 21
            )
            assert len(list(run(conn, statement, params).scalars())) == 11  # 777 and 7770..7779
        finally:
            tx.rollback()


def test_failure_groups_are_counted_from_their_index(engine):
    from app.engine import failure_groups

    with engine.connect() as conn:
        tx = conn.begin()
        try:
            _seed(conn)
            conn.execute(
                text(
                    # a tenth of them failed (the rest succeeded), all of one cause
                    "UPDATE workflow_instances SET completed_at = now(), "
                    "state = CASE WHEN business_key LIKE '%0' THEN 'FAILED' ELSE 'SUCCEEDED' END, "
                    "error = CASE WHEN business_key LIKE '%0' THEN jsonb_build_object('step_key', 'pay', "
                    "'code', 'TASK_FAILED', 'message', 'card ' || business_key || ' declined') END "
                    "WHERE namespace_id = 'ns-find'"
                )
            )
            conn.execute(text("ANALYZE workflow_instances"))
            # the index can serve the query (its keys are the query's own); which plan wins on a table of this
            # size depends on what else the session's tests left in it (bench.console times it at 1 M)
            conn.execute(text("SET LOCAL enable_seqscan = off"))
            params = {"ns": "ns-find", "def": None, "lim": 20, "allowed": None}
            plan = json.dumps(
                conn.execute(
                    text("EXPLAIN (FORMAT JSON) " + failure_groups._GROUPS.text), params
                ).scalar_one()
            )
            assert "ix_workflow_instances_failed" in plan, plan
            got = failure_groups.groups(conn, "ns-find", None)
            assert got["group_count"] == 1 and got["groups"][0]["count"] == N // 10
            assert got["groups"][0]["message_group"] == "card Order-<n> declined"
        finally:
            tx.rollback()
