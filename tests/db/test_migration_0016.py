"""Migration 0016_i14 (compact rows: enum types, columns by width) rewrites the job and attempt
tables: its upgrade -> downgrade -> upgrade round trip keeps every row, id, sequence position,
foreign key, trigger and autovacuum setting, and the downgrade gives back the schema of 0015."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from app.migrate import alembic_config, upgrade

JOBS = "SELECT id, type, queue, status, attempts, attempt_id, worker_id, payload, trace_id FROM workflow_jobs ORDER BY id"
ATTEMPTS = "SELECT id, job_id, generation, attempt, status, worker_id, error FROM workflow_job_executions ORDER BY id"
# the catalog's view of the two tables: columns and types, constraints, indexes, trigger, options
SHAPE = """
SELECT 'column', c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
       || CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relname IN ('workflow_jobs', 'workflow_job_executions') AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'constraint', conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid IN ('workflow_jobs'::regclass, 'workflow_job_executions'::regclass, 'workflow_job_effects'::regclass)
UNION ALL
SELECT 'index', pg_get_indexdef(indexrelid) FROM pg_index
WHERE indrelid IN ('workflow_jobs'::regclass, 'workflow_job_executions'::regclass)
UNION ALL
SELECT 'trigger', pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'workflow_job_executions'::regclass
  AND NOT tgisinternal
UNION ALL
SELECT 'options', relname || ' ' || array_to_string(reloptions, ',') FROM pg_class
WHERE relname IN ('workflow_jobs', 'workflow_job_executions')
ORDER BY 1, 2
"""


def _fill(eng: Engine) -> None:
    """A finished job with two attempts, a running one (open attempt on its row), a paused one, a
    dead letter and an outbound job, an effect receipt; the sequences moved past the rows' ids."""
    with eng.begin() as conn:
        conn.execute(
            text(
                """
INSERT INTO workflow_jobs (type, queue, status, payload, attempts, max_attempts, operation_key, trace_id,
    finished_at, result) VALUES ('delay_wake', 'workflow-ledger', 'succeeded', '{"n": 1}', 2, 3, 'op1', 'tr-1',
    now(), '{"ok": true}');
INSERT INTO workflow_job_executions (job_id, generation, attempt, status, worker_id, request, due_at,
    started_at, finished_at, error, duration_ms) VALUES
    (1, 1, 1, 'failed', 'w-1', '{"n": 1}', now(), now(), now(), 'boom', 5),
    (1, 1, 2, 'succeeded', 'w-1', '{"n": 1}', now(), now(), now(), NULL, 3);
INSERT INTO workflow_jobs (type, queue, status, attempts, max_attempts, operation_key, trace_id, lease_token,
    lease_until, execution_deadline, attempt_id, worker_id, attempt_started_at) VALUES
    ('task_timeout', 'workflow-ledger', 'running', 1, 5, 'op2', 'tr-2', gen_random_uuid(),
     now() + interval '1 minute', now() + interval '1 minute', nextval('workflow_job_executions_id_seq'),
     'w-2', now());
INSERT INTO workflow_jobs (type, queue, status, max_attempts, operation_key, trace_id, remaining_ms) VALUES
    ('delay_wake', 'workflow-ledger', 'paused', 5, 'op3', 'tr-3', 1500);
INSERT INTO workflow_jobs (type, queue, status, attempts, max_attempts, operation_key, trace_id, finished_at,
    last_error, error_code) VALUES ('webhook_delivery', 'workflow-ledger-outbound', 'dead', 10, 10, 'op4',
    'tr-4', now(), 'receiver down', 'HANDLER_ERROR');
INSERT INTO workflow_job_effects (operation_key, step_key, job_id, generation) VALUES ('op4', 's', 4, 1);
SELECT nextval('workflow_jobs_id_seq') FROM generate_series(1, 5);
SELECT nextval('workflow_job_executions_id_seq') FROM generate_series(1, 7);
"""
            )
        )


def _state(eng: Engine) -> dict:
    with eng.connect() as conn:
        return {
            "jobs": [tuple(r) for r in conn.execute(text(JOBS))],
            "attempts": [tuple(r) for r in conn.execute(text(ATTEMPTS))],
            "effects": [tuple(r) for r in conn.execute(text("SELECT id, job_id FROM workflow_job_effects"))],
            "sequences": [
                tuple(r)
                for r in conn.execute(
                    text(
                        "SELECT 'jobs', last_value, is_called FROM workflow_jobs_id_seq UNION ALL "
                        "SELECT 'attempts', last_value, is_called FROM workflow_job_executions_id_seq"
                    )
                )
            ],
        }


def _shape(eng: Engine) -> list[tuple[str, str]]:
    with eng.connect() as conn:
        return [tuple(r) for r in conn.execute(text(SHAPE))]


def _column_types(eng: Engine) -> dict[str, str]:
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT table_name || '.' || column_name, udt_name FROM information_schema.columns "
                "WHERE table_name IN ('workflow_jobs', 'workflow_job_executions') "
                "AND column_name IN ('status', 'type', 'queue')"
            )
        )
        return dict(rows.all())


def _still_works(eng: Engine) -> None:
    """The identity sequences hand out the next ids, the attempt trigger refuses an update, and the
    foreign keys cascade (attempts) and set NULL (receipts) when the job goes."""
    with eng.begin() as conn:
        new_job = conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, max_attempts, operation_key, trace_id) "
                "VALUES ('delay_wake', 'workflow-ledger', 3, 'op-new', 'tr-new') RETURNING id"
            )
        ).scalar_one()
        new_attempt = conn.execute(
            text(
                "INSERT INTO workflow_job_executions (job_id, generation, attempt, status, due_at) "
                "VALUES (:j, 1, 1, 'succeeded', now()) RETURNING id"
            ),
            {"j": new_job},
        ).scalar_one()
    with pytest.raises(DBAPIError, match="immutable"), eng.begin() as conn:
        conn.execute(text("UPDATE workflow_job_executions SET error = 'x' WHERE id = :i"), {"i": new_attempt})
    with eng.begin() as conn:  # job 1 has two attempts, job 4 a receipt
        conn.execute(text("DELETE FROM workflow_jobs WHERE id IN (1, 4, :n)"), {"n": new_job})
        left = conn.execute(
            text("SELECT count(*) FROM workflow_job_executions WHERE job_id IN (1, :n)"), {"n": new_job}
        ).scalar_one()
        receipt = conn.execute(
            text("SELECT job_id FROM workflow_job_effects WHERE operation_key = 'op4'")
        ).scalar()
    assert left == 0 and receipt is None
    assert (new_job, new_attempt) == (10, 11)  # 4 jobs + 5 drawn; 2 attempts + 1 open + 7 drawn


def test_upgrade_downgrade_upgrade_keeps_rows_ids_sequences_and_schema(scratch):
    url, eng = scratch
    upgrade(url, "0015_i14")
    _fill(eng)
    before, shape_0015 = _state(eng), _shape(eng)

    upgrade(url, "0016_i14")
    assert _state(eng) == before
    shape_0016 = _shape(eng)
    assert _column_types(eng) == {
        "workflow_jobs.status": "workflow_job_status",
        "workflow_jobs.type": "workflow_job_type",
        "workflow_jobs.queue": "workflow_job_queue",
        "workflow_job_executions.status": "workflow_attempt_status",
    }
    columns = [s for kind, s in shape_0016 if kind == "column"]
    assert len(columns) == len([s for kind, s in shape_0015 if kind == "column"])
    names = {s.split(" ", 1)[1] for kind, s in shape_0016 if kind == "constraint"}
    assert {
        "workflow_job_effects_job_id_fkey FOREIGN KEY (job_id) REFERENCES workflow_jobs(id) ON DELETE SET NULL",
        "workflow_job_executions_job_id_fkey FOREIGN KEY (job_id) REFERENCES workflow_jobs(id) ON DELETE CASCADE",
        "workflow_jobs_pkey PRIMARY KEY (id)",
        "ck_workflow_jobs_running_has_lease CHECK (((status = 'running'::workflow_job_status) = "
        "(lease_token IS NOT NULL)))",
    } <= names
    with eng.connect() as conn:  # the columns in width order: 8-byte first, text and jsonb last
        order = conn.execute(
            text(
                "SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute "
                "WHERE attrelid = 'workflow_job_executions'::regclass AND attnum > 0"
            )
        ).scalar()
    assert order.startswith("id,job_id,due_at,started_at,finished_at,generation,attempt,duration_ms,status")

    command.downgrade(alembic_config(url), "0015_i14")
    assert _state(eng) == before
    assert _shape(eng) == shape_0015  # the very schema of 0015: text columns, CHECKs, column order

    upgrade(url, "0016_i14")
    assert _state(eng) == before
    assert _shape(eng) == shape_0016
    _still_works(eng)
