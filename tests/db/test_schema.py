"""The migrated schema matches the models (procrastinate-style migration test)."""

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from app.db import transaction
from app.files import ROOT
from app.ledger import hints, job_reads
from app.ledger.enqueue import enqueue
from app.ledger.models import jobs, trace_is, trace_match_sql
from app.ledger.partitions import EXECUTIONS, ensure, is_history_partition
from app.migrate import upgrade
from app.schema import metadata


def _not_a_partition(name, type_, parent_names) -> bool:
    """The partitions of the history tables (and their indexes) are the drain's, not the models'."""
    table = name if type_ == "table" else parent_names.get("table_name")
    return not (table and is_history_partition(table))


def test_migrated_schema_matches_models(engine):
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"compare_server_default": True, "include_name": _not_a_partition}
        )
        diff = compare_metadata(ctx, metadata)
    assert diff == [], f"migrations and models differ: {diff}"


def test_finished_attempts_are_immutable(db):

    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, max_attempts, operation_key, trace_id) "
                "VALUES ('delay_wake', 'workflow-ledger', 3, 'op', 't')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO workflow_job_executions (job_id, generation, attempt, status, lease_token, due_at) "
                "VALUES (1, 1, 1, 'succeeded', gen_random_uuid(), now())"
            )
        )
    with pytest.raises(DBAPIError, match="immutable"), db.begin() as conn:
        conn.execute(text("UPDATE workflow_job_executions SET error = 'rewritten' WHERE id = 1"))


def test_rolled_back_transaction_leaves_no_hint_state_behind(db):
    """Regression: a rollback used to leave the per-connection hint set behind, so the next
    transaction on the same pooled connection published nothing."""

    sent: list[str] = []
    hints.set_publisher(sent.append)
    try:

        class Boom(Exception):
            pass

        try:
            with transaction(db) as conn:
                enqueue(conn, "delay_wake", {})
                raise Boom
        except Boom:
            pass
        assert sent == []
        for _ in range(3):  # whichever pooled connection comes back, the hint must go out
            with transaction(db) as conn:
                enqueue(conn, "delay_wake", {})
        assert sent == ["workflow-ledger"] * 3
    finally:
        hints.set_publisher(None)


def test_the_churning_ledger_tables_declare_their_own_vacuum_thresholds(engine):
    """Autovacuum stays at the server's defaults; the job and attempt tables ask for a vacuum after
    1,000 + 1 % dead rows instead of 20 % (migration 0012_i14), so a week of history does not hold
    a fifth of its size in dead versions between two vacuums."""

    with engine.begin() as conn:
        ensure(conn, EXECUTIONS)  # the attempts are partitioned (migration 0031): each partition says it
        rows = dict(
            conn.execute(
                text(
                    "SELECT relname, reloptions FROM pg_class WHERE relname = 'workflow_jobs' "
                    "OR oid IN (SELECT inhrelid FROM pg_inherits "
                    "           WHERE inhparent = CAST('workflow_job_executions' AS regclass))"
                )
            ).all()
        )
    assert len(rows) >= 3, rows  # the jobs, the legacy partition and at least one of days
    for table in rows:
        options = dict(o.split("=", 1) for o in rows[table])
        assert options["autovacuum_vacuum_scale_factor"] == "0.01", table
        assert options["autovacuum_vacuum_threshold"] == "1000", table
        assert options["autovacuum_vacuum_insert_scale_factor"] == "0.05", table


def test_migration_0013_moves_running_attempts_onto_their_job_rows(scratch):
    """Upgrading with a job in flight: its running attempt row becomes the open attempt on the job
    row (id, worker, start kept), finished attempt rows stay, and the attempt table is keyed by
    (job, generation, attempt)."""
    url, eng = scratch
    upgrade(url, "0012_i14")
    with eng.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (id, type, queue, status, attempts, max_attempts, operation_key, "
                "trace_id, lease_token, lease_until, execution_deadline) VALUES (7, 'delay_wake', "
                "'workflow-ledger', 'running', 2, 3, 'op', 't', gen_random_uuid(), now() + interval '1 minute', "
                "now() + interval '1 minute')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO workflow_job_executions (id, job_id, generation, attempt, status, lease_token, "
                "worker_id, due_at, started_at, finished_at) VALUES "
                "(41, 7, 1, 1, 'failed', gen_random_uuid(), 'w-old', now(), now() - interval '1 minute', now()),"
                "(42, 7, 1, 2, 'running', gen_random_uuid(), 'w-now', now(), now() - interval '5 seconds', NULL)"
            )
        )
    upgrade(url)
    with eng.connect() as conn:
        j = conn.execute(
            text(
                "SELECT attempt_id, worker_id, attempt_started_at IS NOT NULL AS s FROM "
                "workflow_jobs WHERE id = 7"
            )
        ).one()
        assert (j.attempt_id, j.worker_id, j.s) == (42, "w-now", True)
        rows = conn.execute(text("SELECT id, status FROM workflow_job_executions ORDER BY id")).all()
        assert [tuple(r) for r in rows] == [(41, "failed")]
        pk = conn.execute(
            text(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conname = 'workflow_job_executions_pkey'"
            )
        ).scalar()
        assert pk == "PRIMARY KEY (job_id, generation, attempt)"


def test_migration_0025_ranks_the_open_tasks_by_their_instance(scratch):
    """Upgrading with tasks open: each open task takes its instance's creation time as its claim rank (the
    claim order of migration 0025), a closed one keeps NULL, and the claim index orders by it. Foreign keys
    are not checked while the rows are made (``session_replication_role``): only these two tables matter."""
    url, eng = scratch
    upgrade(url, "0024_credentials_notify")
    with eng.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(
            text(
                "INSERT INTO workflow_instances (id, namespace_id, definition_id, definition_version_id, version, "
                "state, revision, paused, control_revision, input, queues, deadline_at, trace_id, created_at, "
                "updated_at) VALUES "
                "('old', 'ns', 'd', 'dv', 'v1', 'RUNNING', 1, false, 1, '{}', '{}', now() + interval '1 hour', 't', "
                "'2026-01-01T00:00:00Z', now()), "
                "('new', 'ns', 'd', 'dv', 'v1', 'RUNNING', 1, false, 1, '{}', '{}', now() + interval '1 hour', 't', "
                "'2026-06-01T00:00:00Z', now())"
            )
        )
        conn.execute(
            text(
                "INSERT INTO workflow_tasks (id, namespace_id, instance_id, step_id, step_key, activation_id, queue, "
                "state, deadline_at, created_at) VALUES "
                "('t-new', 'ns', 'new', 's', 'k', 'a', 'q', 'PENDING', now() + interval '1 hour', '2026-06-01T00:00:01Z'), "
                "('t-old', 'ns', 'old', 's', 'k', 'a', 'q', 'CLAIMED', now() + interval '1 hour', '2026-06-02T00:00:00Z'), "
                "('t-done', 'ns', 'old', 's', 'k', 'a', 'q', 'COMPLETED', now() + interval '1 hour', '2026-01-01T00:00:01Z')"
            )
        )
    upgrade(url)
    with eng.connect() as conn:
        ranks = dict(
            conn.execute(
                text(
                    "SELECT id, to_char(instance_created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') FROM workflow_tasks"
                )
            ).all()
        )
        assert ranks == {"t-new": "2026-06-01", "t-old": "2026-01-01", "t-done": None}
        index = conn.execute(
            text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_workflow_tasks_claim'")
        ).scalar()
        assert "(namespace_id, queue, instance_created_at, created_at, id)" in index


def test_trace_lookups_go_through_the_trace_hash_index(db):
    """``trace_is`` (the trace chain and the job list filter) and ``trace_match_sql`` (replay) are
    served by the trace index on the id's 64-bit hash, and match the whole id only."""

    shared = "abcdef0123456789abcdef012345678"  # two ids that differ in their last character
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, max_attempts, operation_key, trace_id) "
                "SELECT 'delay_wake', 'workflow-ledger', 3, 'op', md5(g::text) FROM generate_series(1, 5000) g"
            )
        )
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, max_attempts, operation_key, trace_id) VALUES "
                "('delay_wake', 'workflow-ledger', 3, 'op', :a), ('delay_wake', 'workflow-ledger', 3, 'op', :b)"
            ),
            {"a": shared + "a", "b": shared + "b"},
        )
        conn.execute(text("ANALYZE workflow_jobs"))
        query = select(jobs.c.trace_id).where(trace_is(shared + "b"))
        assert conn.execute(query).scalars().all() == [shared + "b"]
        compiled = query.compile(conn, compile_kwargs={"literal_binds": True})
        plan = "\n".join(r[0] for r in conn.execute(text(f"EXPLAIN {compiled}")))
        raw = f"SELECT trace_id FROM workflow_jobs WHERE {trace_match_sql('trace_id', 't')}"
        assert conn.execute(text(raw), {"t": shared + "a"}).scalars().all() == [shared + "a"]
        raw_plan = "\n".join(r[0] for r in conn.execute(text(f"EXPLAIN {raw}"), {"t": shared + "a"}))
    assert "ix_workflow_jobs_trace" in plan, plan
    assert "ix_workflow_jobs_trace" in raw_plan, raw_plan


def test_the_newest_first_list_is_an_index_scan_with_its_cursor_as_index_condition(db):
    """``ix_workflow_jobs_created`` holds ``created_at`` only (migration 0015): the list's order
    (created_at, id descending) is an index scan plus an incremental sort of equal ``created_at``, its
    keyset cursor an index condition, and jobs sharing ``created_at`` (one transaction's) are paged
    through in id order without a gap or a repeat."""

    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, max_attempts, operation_key, trace_id, created_at) "
                "SELECT 'delay_wake', 'workflow-ledger', 3, 'op', md5(g::text), "
                "       now() - (g / 7) * interval '1 second' FROM generate_series(1, 20000) g"
            )
        )
        conn.execute(text("ANALYZE workflow_jobs"))
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                text(
                    "EXPLAIN SELECT id FROM workflow_jobs WHERE (created_at, id) < (now(), 9999999) "
                    "ORDER BY created_at DESC, id DESC LIMIT 21"
                )
            )
        )
        assert "ix_workflow_jobs_created" in plan and "Index Cond" in plan, plan
        expected = (
            conn.execute(text("SELECT id FROM workflow_jobs ORDER BY created_at DESC, id DESC LIMIT 60"))
            .scalars()
            .all()
        )
        seen: list[int] = []
        cursor = None
        for _ in range(6):
            page = job_reads.list_jobs(conn, job_reads.JobFilter(), limit=10, cursor=cursor)
            seen += [int(j["id"]) for j in page.items]
            cursor = page.next_cursor
    assert seen == expected


# Tables the product never deletes a row from: a foreign key into them is never checked on a delete, so its
# referencing column needs no index (``test_every_foreign_key_is_checked_through_an_index`` checks both).
NEVER_DELETED = ("namespaces", "workflow_definitions", "workflow_definition_versions")

_FOREIGN_KEYS = """
SELECT c.conname, c.conrelid::regclass::text AS tbl, c.confrelid::regclass::text AS ref,
       array_agg(a.attname::text ORDER BY k.ord) AS cols
FROM pg_constraint c
CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace
GROUP BY c.oid, c.conname, c.conrelid, c.confrelid
ORDER BY 1
"""


def test_every_foreign_key_is_checked_through_an_index(engine):
    """Deleting a referenced row makes PostgreSQL look up its referencing rows (``SELECT 1 FROM <table>
    WHERE <fk columns> = $1 FOR KEY SHARE``, or the ``ON DELETE`` action's statement) once per deleted row:
    without an index that the lookup can use, each is a sequential scan of the referencing table, and a
    batch removal costs rows times table size (issue 50: one batch of 5,000 workflows ran over 4 minutes
    at 100,000 workflows, for ``workflow_tasks.step_id`` and ``workflow_waits.instance_id``). Each foreign
    key's lookup is planned as the generic plan of a prepared statement with sequential scans disabled: it
    must be an index scan. The foreign keys into tables the product never deletes from are the exception,
    and no statement of the product deletes from those."""
    with engine.connect() as conn:
        fks = conn.execute(text(_FOREIGN_KEYS)).all()
        assert {fk.conname for fk in fks} >= {
            "workflow_tasks_instance_id_fkey",
            "workflow_waits_instance_id_fkey",
        }
        conn.execute(text("SET enable_seqscan = off"))
        conn.execute(text("SET plan_cache_mode = force_generic_plan"))
        unindexed = []
        for fk in fks:
            if fk.ref in NEVER_DELETED:
                continue
            where = " AND ".join(f"{col} = ${n}" for n, col in enumerate(fk.cols, 1))
            types = ", ".join(
                conn.execute(
                    text(
                        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                        "CAST(:t AS regclass) AND attname = :c"
                    ),
                    {"t": fk.tbl, "c": col},
                ).scalar_one()
                for col in fk.cols
            )
            conn.execute(text(f"PREPARE fk_lookup ({types}) AS SELECT 1 FROM ONLY {fk.tbl} x WHERE {where}"))
            args = ", ".join("NULL" for _ in fk.cols)
            plan = "\n".join(r[0] for r in conn.execute(text(f"EXPLAIN EXECUTE fk_lookup ({args})")))
            conn.execute(text("DEALLOCATE fk_lookup"))
            if "Seq Scan" in plan:
                unindexed.append(f"{fk.conname}: {fk.tbl} ({', '.join(fk.cols)}) -> {fk.ref}\n{plan}")
        conn.rollback()
    assert not unindexed, "foreign keys checked by a sequential scan:\n" + "\n".join(unindexed)
    sources = "\n".join(p.read_text() for p in (ROOT / "app").rglob("*.py")).lower()
    for table in NEVER_DELETED:
        assert f"delete from {table} " not in sources and f"delete from {table}\n" not in sources, table
