"""Per-table autovacuum thresholds of the ledger's churning tables.

PostgreSQL's defaults vacuum a table once 20 % of its rows are dead. A job ledger keeps its finished
history for days (7 by default), so 20 % of a week of jobs is a large pile of dead job versions and
index entries between two vacuums, which claims, the runtime status and the disk all pay for. The
ledger's tables declare their own thresholds (storage parameters: nothing to configure on the
server, whose autovacuum stays at its defaults): vacuum after 1,000 + 1 % dead rows, analyze after
1,000 + 2 % changed rows, and vacuum an insert-mostly table after 1,000 + 5 % new rows (so its
visibility map stays current for index-only scans).

Revision ID: 0012_i14
Revises: 0011_i14
Create Date: 2026-12-01
"""

from alembic import op

revision = "0012_i14"
down_revision = "0011_i14"
branch_labels = None
depends_on = None

TABLES = ("workflow_jobs", "workflow_job_executions")
PARAMS = {
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_analyze_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_vacuum_insert_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.05",
}


def upgrade() -> None:
    settings = ", ".join(f"{k} = {v}" for k, v in PARAMS.items())
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} SET ({settings})")


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} RESET ({', '.join(PARAMS)})")
