"""Ledger hot path: fewer index writes per job.

- the idempotency key index becomes partial (jobs without a key cost no entry);
- ix_workflow_job_executions_job is redundant with uq_workflow_job_executions_attempt (job_id leads);
- ix_workflow_job_executions_running named ``status``, which made every attempt close a non-HOT
  update; without it, and with fillfactor 80, closing an attempt can stay on its heap page.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_constraint("uq_workflow_jobs_idempotency_key", "workflow_jobs", type_="unique")
    op.create_index(
        "uq_workflow_jobs_idempotency_key",
        "workflow_jobs",
        ["idempotency_key"],
        unique=True,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.drop_index("ix_workflow_job_executions_job", table_name="workflow_job_executions")
    op.drop_index("ix_workflow_job_executions_running", table_name="workflow_job_executions")
    op.execute("ALTER TABLE workflow_job_executions SET (fillfactor = 80)")


def downgrade() -> None:
    op.execute("ALTER TABLE workflow_job_executions RESET (fillfactor)")
    op.create_index(
        "ix_workflow_job_executions_running",
        "workflow_job_executions",
        ["job_id"],
        postgresql_where=sa.text("status = 'running'"),
    )
    op.create_index("ix_workflow_job_executions_job", "workflow_job_executions", ["job_id"])
    op.drop_index("uq_workflow_jobs_idempotency_key", table_name="workflow_jobs")
    op.create_unique_constraint("uq_workflow_jobs_idempotency_key", "workflow_jobs", ["idempotency_key"])
