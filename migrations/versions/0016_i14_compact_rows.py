"""Compact job and attempt rows: enum types, columns ordered by width.

Every version of a job row (insert, claim, settle) and every final attempt row carries ``status``,
``type`` and ``queue`` as text: 10, 11-20 and 16-25 bytes with their headers and padding. They become
PostgreSQL enum types (4 bytes each), and the columns are reordered so that no alignment padding sits
between them: 8-byte columns first, then the 4-byte ones (integers and enums), the uuid, and the
variable-length and mostly-NULL columns last (a NULL takes no space at all, only its bit).

- ``workflow_job_status``, ``workflow_job_type``, ``workflow_job_queue`` (on ``workflow_jobs``) and
  ``workflow_attempt_status`` (on ``workflow_job_executions``) hold exactly the values the four CHECK
  constraints allowed; the types are those constraints now, so the CHECKs are dropped. A new job
  type or queue is ``ALTER TYPE ... ADD VALUE`` in a migration, as the CHECK was before.
- Reordering columns is a rewrite: each table is created anew, filled from the old one in one
  ``INSERT ... SELECT``, the old one dropped and the new one renamed. Everything the old tables had is
  created again under its name: primary keys, the identity sequences (``workflow_jobs_id_seq`` and
  ``workflow_job_executions_id_seq``, which the claim draws attempt ids from by name) at their
  positions, every index, the foreign keys of ``workflow_job_effects`` (ON DELETE SET NULL) and
  ``workflow_job_executions`` (ON DELETE CASCADE), the immutability trigger of the attempts, the
  per-table autovacuum settings of migration 0012. Both tables are analyzed at the end (a new table
  has no statistics).
- ``ix_workflow_jobs_finished (status, finished_at) WHERE finished_at IS NOT NULL`` becomes two
  partial indexes on ``finished_at`` alone, one per retention: ``ix_workflow_jobs_finished`` (status
  ``succeeded`` / ``canceled``, kept 7 days) and ``ix_workflow_jobs_dead_letters`` (``dead`` /
  ``failed``, 30 days). Each sweep states its statuses as literals, so the planner proves the
  predicate (``app/ledger/retention.py``).
- Indexes whose keys grow at the right edge are built with ``fillfactor = 100`` (a split of the
  rightmost page then leaves the left page full, not 90 %): the attempts' primary key and
  ``ix_workflow_job_executions_started`` (attempt rows are never updated), ``ix_workflow_jobs_created``
  and the two retention indexes (a job's versions share its ``created_at``; ``finished_at`` is the
  settle's time). Not the job's primary key: a job's later versions land on pages left full, which
  then split in two (measured larger, bench/README.md).

The rewrite holds ACCESS EXCLUSIVE locks on the three tables for its whole duration (measured: see
docs/operations.md, "Upgrading"); run it, like every migration, in the release phase with the workers
stopped.

Revision ID: 0016_i14
Revises: 0015_i14
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0016_i14"
down_revision = "0015_i14"
branch_labels = None
depends_on = None

# The enum types and their values, as the CHECK constraints of migrations 0001-0008 allowed them.
ENUMS = {
    "workflow_job_status": ("pending", "running", "paused", "succeeded", "failed", "dead", "canceled"),
    "workflow_job_type": (
        "delay_wake",
        "task_timeout",
        "subprocess_spawn",
        "subprocess_join",
        "schedule_launch",
        "trigger_dispatch",
        "external_dispatch",
        "event_dispatch",
        "webhook_delivery",
        "compensation_action",
        "automation_action",
    ),
    "workflow_job_queue": ("workflow-ledger", "workflow-ledger-outbound"),
    "workflow_attempt_status": ("running", "succeeded", "failed", "skipped", "canceled"),
}
CHECKED = (  # the CHECK constraints the enums replace: (table, column, constraint, enum)
    ("workflow_jobs", "status", "ck_workflow_jobs_status", "workflow_job_status"),
    ("workflow_jobs", "type", "ck_workflow_jobs_type", "workflow_job_type"),
    ("workflow_jobs", "queue", "ck_workflow_jobs_queue", "workflow_job_queue"),
    ("workflow_job_executions", "status", "ck_workflow_job_executions_status", "workflow_attempt_status"),
)

VACUUM = (
    "autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0.01, "
    "autovacuum_analyze_threshold = 1000, autovacuum_analyze_scale_factor = 0.02, "
    "autovacuum_vacuum_insert_threshold = 1000, autovacuum_vacuum_insert_scale_factor = 0.05"
)
CROSS_CHECKS = """,
    CONSTRAINT ck_workflow_jobs_max_attempts CHECK (max_attempts >= 1),
    CONSTRAINT ck_workflow_jobs_timeout CHECK (execution_timeout_ms > 0),
    CONSTRAINT ck_workflow_jobs_running_has_lease CHECK ((status = 'running') = (lease_token IS NOT NULL)),
    CONSTRAINT ck_workflow_jobs_paused CHECK ((status = 'paused') = (remaining_ms IS NOT NULL)),
    CONSTRAINT ck_workflow_jobs_open_attempt CHECK ((status = 'running') = (attempt_id IS NOT NULL))"""

# ------------------------------------------------------------------------------------------ the new rows
JOBS = """
    id bigint NOT NULL GENERATED BY DEFAULT AS IDENTITY (SEQUENCE NAME {seq}),
    run_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    lease_until timestamptz,
    execution_deadline timestamptz,
    attempt_started_at timestamptz,
    attempt_id bigint,
    remaining_ms bigint,
    priority integer NOT NULL DEFAULT 0,
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    generation integer NOT NULL DEFAULT 1,
    execution_timeout_ms integer NOT NULL DEFAULT 600000,
    type workflow_job_type NOT NULL,
    queue workflow_job_queue NOT NULL,
    status workflow_job_status NOT NULL DEFAULT 'pending',
    lease_token uuid,
    payload jsonb NOT NULL DEFAULT '{{}}'::jsonb,
    operation_key text NOT NULL,
    trace_id text NOT NULL,
    instance_id text,
    task_id text,
    step_key text,
    idempotency_key text,
    worker_id text,
    error_code text,
    last_error text,
    result jsonb,
    effect_marker jsonb,
    traceparent text"""
EXECUTIONS = """
    id bigint NOT NULL GENERATED BY DEFAULT AS IDENTITY (SEQUENCE NAME {seq}),
    job_id bigint NOT NULL,
    due_at timestamptz NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    generation integer NOT NULL,
    attempt integer NOT NULL,
    duration_ms integer,
    status workflow_attempt_status NOT NULL DEFAULT 'running',
    lease_token uuid,
    worker_id text,
    error_code text,
    error text,
    request jsonb,
    response jsonb"""
JOB_INDEXES_NEW = [
    "CREATE INDEX ix_workflow_jobs_created ON workflow_jobs (created_at) WITH (fillfactor = 100)",
    "CREATE INDEX ix_workflow_jobs_finished ON workflow_jobs (finished_at) WITH (fillfactor = 100) "
    "WHERE status IN ('succeeded', 'canceled')",
    "CREATE INDEX ix_workflow_jobs_dead_letters ON workflow_jobs (finished_at) WITH (fillfactor = 100) "
    "WHERE status IN ('dead', 'failed')",
]
EXECUTION_INDEXES_NEW = [
    "ALTER TABLE workflow_job_executions ADD CONSTRAINT workflow_job_executions_pkey "
    "PRIMARY KEY (job_id, generation, attempt) WITH (fillfactor = 100)",
    "CREATE INDEX ix_workflow_job_executions_started ON workflow_job_executions (started_at) "
    "WITH (fillfactor = 100)",
]

# ------------------------------------------------------------------------------------ the rows of 0015
JOBS_OLD = """
    id bigint NOT NULL GENERATED BY DEFAULT AS IDENTITY (SEQUENCE NAME {seq}),
    type text NOT NULL,
    queue text NOT NULL,
    status text NOT NULL DEFAULT 'pending',
    payload jsonb NOT NULL DEFAULT '{{}}'::jsonb,
    instance_id text,
    task_id text,
    step_key text,
    priority integer NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(),
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    generation integer NOT NULL DEFAULT 1,
    lease_token uuid,
    lease_until timestamptz,
    execution_timeout_ms integer NOT NULL DEFAULT 600000,
    execution_deadline timestamptz,
    remaining_ms bigint,
    effect_marker jsonb,
    result jsonb,
    last_error text,
    error_code text,
    operation_key text NOT NULL,
    idempotency_key text,
    trace_id text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    traceparent text,
    attempt_id bigint,
    worker_id text,
    attempt_started_at timestamptz"""
EXECUTIONS_OLD = """
    id bigint NOT NULL GENERATED BY DEFAULT AS IDENTITY (SEQUENCE NAME {seq}),
    job_id bigint NOT NULL,
    generation integer NOT NULL,
    attempt integer NOT NULL,
    status text NOT NULL DEFAULT 'running',
    lease_token uuid,
    worker_id text,
    request jsonb,
    response jsonb,
    error text,
    error_code text,
    due_at timestamptz NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    duration_ms integer"""
JOB_INDEXES_OLD = [
    "CREATE INDEX ix_workflow_jobs_created ON workflow_jobs (created_at)",
    "CREATE INDEX ix_workflow_jobs_finished ON workflow_jobs (status, finished_at) WHERE finished_at IS NOT NULL",
]
EXECUTION_INDEXES_OLD = [
    "ALTER TABLE workflow_job_executions ADD CONSTRAINT workflow_job_executions_pkey "
    "PRIMARY KEY (job_id, generation, attempt)",
    "CREATE INDEX ix_workflow_job_executions_started ON workflow_job_executions (started_at)",
]

# ------------------------------------------------------------------------------- the same either way
JOB_INDEXES = [
    "ALTER TABLE workflow_jobs ADD CONSTRAINT workflow_jobs_pkey PRIMARY KEY (id)",
    "CREATE UNIQUE INDEX uq_workflow_jobs_idempotency_key ON workflow_jobs (idempotency_key) "
    "WHERE idempotency_key IS NOT NULL",
    "CREATE INDEX ix_workflow_jobs_claim ON workflow_jobs (queue, priority, run_at, id) WHERE status = 'pending'",
    "CREATE INDEX ix_workflow_jobs_claim_due ON workflow_jobs (queue, run_at, id) WHERE status = 'pending'",
    "CREATE INDEX ix_workflow_jobs_running_lease ON workflow_jobs (lease_until) WHERE status = 'running'",
    "CREATE INDEX ix_workflow_jobs_instance ON workflow_jobs (instance_id) WHERE instance_id IS NOT NULL",
    "CREATE INDEX ix_workflow_jobs_trace ON workflow_jobs (hashtextextended(trace_id, 0))",
    "CREATE INDEX ix_workflow_jobs_status_type ON workflow_jobs (status, type)",
]
FOREIGN_KEYS = {  # (table, constraint) -> definition; both reference workflow_jobs
    (
        "workflow_job_executions",
        "workflow_job_executions_job_id_fkey",
    ): "FOREIGN KEY (job_id) REFERENCES workflow_jobs (id) ON DELETE CASCADE",
    (
        "workflow_job_effects",
        "workflow_job_effects_job_id_fkey",
    ): "FOREIGN KEY (job_id) REFERENCES workflow_jobs (id) ON DELETE SET NULL",
}
TRIGGER = (
    "CREATE TRIGGER workflow_job_executions_immutable BEFORE UPDATE ON workflow_job_executions "
    "FOR EACH ROW WHEN (OLD.status <> 'running') EXECUTE FUNCTION workflow_job_executions_immutable()"
)


def _columns(body: str) -> list[str]:
    return [line.strip().split()[0] for line in body.strip().splitlines()]


def _rewrite(table: str, body: str, checks: str, casts: dict[str, str], indexes: list[str]) -> None:
    """Create ``table`` anew with the columns of ``body`` (and ``checks``), copy every row into it (each
    column of ``casts`` cast to its type), keep its identity sequence's name and position, drop the old
    table, and build ``indexes``. The caller has dropped the foreign keys that reference the table."""
    new, seq = f"{table}_compact", f"{table}_id_seq"
    op.execute(f"CREATE TABLE {new} ({body.format(seq=seq + '_compact')}{checks}) WITH ({VACUUM})")
    cols = _columns(body)
    values = ", ".join(f"CAST({c} AS {casts[c]})" if c in casts else c for c in cols)
    op.execute(f"INSERT INTO {new} ({', '.join(cols)}) SELECT {values} FROM {table}")
    # the next id drawn is the one the old sequence would have given (a fresh sequence: is_called false)
    op.execute(f"SELECT setval('{seq}_compact', last_value, is_called) FROM {seq}")
    op.execute(f"DROP TABLE {table}")
    op.execute(f"ALTER TABLE {new} RENAME TO {table}")
    op.execute(f"ALTER SEQUENCE {seq}_compact RENAME TO {seq}")
    for statement in indexes:
        op.execute(statement)


def _value_checks(table: str) -> str:
    """The CHECK constraints of migration 0015 that the enum types replace, for ``table``."""
    return "".join(
        f",\n    CONSTRAINT {name} CHECK ({column} IN ({', '.join(repr(v) for v in ENUMS[enum])}))"
        for t, column, name, enum in CHECKED
        if t == table
    )


def _rebuild(*, new: bool) -> None:
    """Both tables rewritten, in the layout of this migration (``new``) or of migration 0015."""
    op.execute(
        "LOCK TABLE workflow_jobs, workflow_job_executions, workflow_job_effects IN ACCESS EXCLUSIVE MODE"
    )
    for table, name in FOREIGN_KEYS:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    enums = {(t, c): e for t, c, _, e in CHECKED}
    if new:
        job_casts = {c: e for (t, c), e in enums.items() if t == "workflow_jobs"}
        execution_casts = {c: e for (t, c), e in enums.items() if t == "workflow_job_executions"}
        _rewrite("workflow_jobs", JOBS, CROSS_CHECKS, job_casts, JOB_INDEXES + JOB_INDEXES_NEW)
        _rewrite("workflow_job_executions", EXECUTIONS, "", execution_casts, EXECUTION_INDEXES_NEW)
    else:
        job_casts = {c: "text" for (t, c) in enums if t == "workflow_jobs"}
        _rewrite(
            "workflow_jobs",
            JOBS_OLD,
            _value_checks("workflow_jobs") + CROSS_CHECKS,
            job_casts,
            JOB_INDEXES + JOB_INDEXES_OLD,
        )
        _rewrite(
            "workflow_job_executions",
            EXECUTIONS_OLD,
            _value_checks("workflow_job_executions"),
            {"status": "text"},
            EXECUTION_INDEXES_OLD,
        )
    op.execute(TRIGGER)
    for (table, name), definition in FOREIGN_KEYS.items():
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")
    op.execute("ANALYZE workflow_jobs, workflow_job_executions")


def upgrade() -> None:
    for name, values in ENUMS.items():
        op.execute(f"CREATE TYPE {name} AS ENUM ({', '.join(repr(v) for v in values)})")
    _rebuild(new=True)


def downgrade() -> None:
    _rebuild(new=False)
    for name in ENUMS:
        op.execute(f"DROP TYPE {name}")
