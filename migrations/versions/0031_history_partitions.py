"""History partitioned by time (issue 50): ``workflow_event_batches`` (by ``created_at``, a week a partition),
``workflow_job_executions`` (by ``started_at``, a day) and ``operation_audit`` (by ``created_at``, a month)
become range-partitioned tables, so that retention drops a whole partition instead of deleting its rows
one by one (``app.ledger.partitions``).

No row is moved and no table is scanned under a lock that blocks writers. For each table, in this
migration's one transaction (catalog changes only, milliseconds whatever the table's size):

- the table is renamed ``<table>_legacy`` and keeps its rows, indexes and constraints;
- a partitioned table with its columns takes its name, and the views over it are made again over it;
- the legacy table becomes its partition: an empty one at once as the range ``(MINVALUE, cutoff)``; one
  with rows as the DEFAULT partition (attaching the only partition as DEFAULT checks no row) with the
  constraint ``<table>_legacy_before CHECK (column < cutoff) NOT VALID`` (new rows are checked, the
  existing ones not). ``cutoff`` is a period boundary at least a day ahead; for a table with rows at
  least a week ahead (``MARGIN``: the week of partitions the drain keeps ahead,
  ``app.ledger.partitions.AHEAD``), so that an installation whose drain does not run for days after the
  upgrade still takes new rows. The release phase (``ledgerflow db upgrade``) settles the partitions
  right after the migrations anyway (``app.engine.retention.settle_history``): it creates those after
  the cutoff, a week ahead.

The release phase, or else the drain (``app.ledger.partitions.ensure``), then validates that constraint (a scan that takes only a
SHARE UPDATE EXCLUSIVE lock: inserts, updates and deletes go on), turns the legacy DEFAULT partition
into the range ``(MINVALUE, cutoff)`` (the validated constraint proves it: no scan), and creates the
range partitions from ``cutoff`` on, a week ahead. The legacy partition is dropped like any other once
its whole range is past retention.

Per table: the parent has no primary key and no index; each partition has its own (the legacy one keeps
the table's; the drain gives every new partition the same ones, ``app.ledger.partitions``), so a key is
unique within its partition: ids are random 128-bit values and an instance's ``last_seq`` is read and
written under the instance's row lock, so nothing relied on a unique index across partitions.

``workflow_job_executions`` loses its foreign key to ``workflow_jobs`` (``ON DELETE CASCADE``): the job
retention no longer deletes attempts row by row; the attempts of a removed job go with their day's
partition. Its attempt ids come from a new sequence of the old name (``workflow_job_executions_id_seq``,
owned by the partitioned table's ``id``), started a million past the legacy one, so that a process still
running the previous code (its prepared statements name the old sequence) draws no id twice. The
immutability triggers (attempts, audit) move to the parent, which gives them to every partition.

Revision ID: 0031_history_partitions
Revises: 0031_compact_event_batches
Create Date: 2026-12-05
"""

from alembic import op

revision = "0031_history_partitions"
down_revision = "0031_compact_event_batches"
branch_labels = None
depends_on = None

# (table, partition key, period): app.ledger.partitions.HISTORY says the same
TABLES = (
    ("workflow_event_batches", "created_at", "week"),
    ("workflow_job_executions", "started_at", "day"),
    ("operation_audit", "created_at", "month"),
)
# how far ahead of the upgrade the bound of a legacy partition with rows is at least (a week: as the drain's
# partitions); an empty one's, a day (a new installation's first partitions start then, as before)
MARGIN = "7 days"
TRIGGERS = {
    "workflow_job_executions": (
        "workflow_job_executions_immutable",
        "BEFORE UPDATE ON {t} FOR EACH ROW WHEN (OLD.status <> 'running') "
        "EXECUTE FUNCTION workflow_job_executions_immutable()",
    ),
    "operation_audit": (
        "operation_audit_append_only",
        "BEFORE UPDATE OR DELETE ON {t} FOR EACH ROW EXECUTE FUNCTION operation_audit_append_only()",
    ),
}
ATTEMPT_IDS = "workflow_job_executions_id_seq"
# views reading a table, each made again over the table of the same name after the rename
_VIEWS = """
SELECT DISTINCT v.oid::regclass::text AS name, pg_get_viewdef(v.oid) AS def
FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class
WHERE d.refobjid = CAST(%(t)s AS regclass) AND v.oid <> CAST(%(t)s AS regclass) AND v.relkind = 'v'
"""


def _one(sql: str, **params: object) -> object:
    return op.get_bind().exec_driver_sql(sql, params).scalar()


def _partition(table: str, column: str, period: str) -> None:
    bind = op.get_bind()
    views = bind.exec_driver_sql(_VIEWS, {"t": table}).all()
    has_rows = _one(f"SELECT EXISTS (SELECT 1 FROM {table})")
    margin = MARGIN if has_rows else "1 day"
    cutoff = _one(f"SELECT date_trunc('{period}', now() + interval '{margin}') + interval '1 {period}'")
    legacy = f"{table}_legacy"
    if table in TRIGGERS:
        op.execute(f"DROP TRIGGER {TRIGGERS[table][0]} ON {table}")
    if table == "workflow_job_executions":
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS workflow_job_executions_job_id_fkey")
        op.execute(f"ALTER SEQUENCE {ATTEMPT_IDS} RENAME TO workflow_job_executions_legacy_id_seq")
    op.execute(f"ALTER TABLE {table} RENAME TO {legacy}")
    op.execute(
        f"CREATE TABLE {table} (LIKE {legacy} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE) "
        f"PARTITION BY RANGE ({column})"
    )
    if table == "workflow_job_executions":
        op.execute(f"CREATE SEQUENCE {ATTEMPT_IDS} OWNED BY {table}.id")
        op.execute(
            f"SELECT setval('{ATTEMPT_IDS}', last_value + 1000000) FROM workflow_job_executions_legacy_id_seq "
            "WHERE is_called"
        )
        op.execute(f"ALTER TABLE {table} ALTER COLUMN id SET DEFAULT nextval('{ATTEMPT_IDS}')")
    if has_rows:
        op.execute(f"ALTER TABLE {table} ATTACH PARTITION {legacy} DEFAULT")
        op.execute(
            f"ALTER TABLE {legacy} ADD CONSTRAINT {legacy}_before CHECK ({column} < '{cutoff.isoformat()}') NOT VALID"  # type: ignore[attr-defined]
        )
    else:
        op.execute(
            f"ALTER TABLE {table} ATTACH PARTITION {legacy} FOR VALUES FROM (MINVALUE) TO ('{cutoff.isoformat()}')"  # type: ignore[attr-defined]
        )
    if table in TRIGGERS:
        name, body = TRIGGERS[table]
        op.execute(f"CREATE TRIGGER {name} " + body.format(t=table))
    for name, definition in views:
        op.execute(f"CREATE OR REPLACE VIEW {name} AS {definition}")


def upgrade() -> None:
    op.execute("SET LOCAL TimeZone = 'UTC'")
    for table, column, period in TABLES:
        _partition(table, column, period)


def downgrade() -> None:
    """Back to plain tables: every partition's rows copied into one table (a long write on a big
    installation; downgrades are for development)."""
    bind = op.get_bind()
    for table, _column, _period in TABLES:
        views = bind.exec_driver_sql(_VIEWS, {"t": table}).all()
        legacy = f"{table}_legacy"
        parts = [
            r[0]
            for r in bind.exec_driver_sql(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = CAST(%(t)s AS regclass)",
                {"t": table},
            ).all()
        ]
        for part in parts:
            op.execute(f"ALTER TABLE {table} DETACH PARTITION {part}")
        op.execute(f"ALTER TABLE {legacy} DROP CONSTRAINT IF EXISTS {legacy}_before")
        for part in parts:
            if part != legacy:
                op.execute(f"INSERT INTO {legacy} SELECT * FROM {part}")
                op.execute(f"DROP TABLE {part}")
        if table in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {TRIGGERS[table][0]} ON {legacy}")
        last = None
        if table == "workflow_job_executions":
            last = _one(f"SELECT last_value FROM {ATTEMPT_IDS}")
            op.execute(f"ALTER SEQUENCE {ATTEMPT_IDS} RENAME TO workflow_job_executions_gone_id_seq")
        op.execute(f"ALTER TABLE {table} RENAME TO {table}_gone")
        op.execute(f"ALTER TABLE {legacy} RENAME TO {table}")
        for name, definition in views:
            op.execute(f"CREATE OR REPLACE VIEW {name} AS {definition}")
        op.execute(f"DROP TABLE {table}_gone")
        if table == "workflow_job_executions":
            op.execute(f"ALTER SEQUENCE workflow_job_executions_legacy_id_seq RENAME TO {ATTEMPT_IDS}")
            op.execute(f"SELECT setval('{ATTEMPT_IDS}', {int(last)})")  # type: ignore[call-overload]
            op.execute(
                "DELETE FROM workflow_job_executions e WHERE NOT EXISTS "
                "(SELECT 1 FROM workflow_jobs j WHERE j.id = e.job_id)"
            )
            op.execute(
                "ALTER TABLE workflow_job_executions ADD CONSTRAINT workflow_job_executions_job_id_fkey "
                "FOREIGN KEY (job_id) REFERENCES workflow_jobs (id) ON DELETE CASCADE"
            )
        if table in TRIGGERS:
            name, body = TRIGGERS[table]
            op.execute(f"CREATE TRIGGER {name} " + body.format(t=table))
