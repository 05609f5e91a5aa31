"""Retention: indexes for the drain's retention sweeps — finished jobs and dead letters by
age, orphaned effect receipts, the audit by age, settled signals by age.

Revision ID: 0008_i14
Revises: 0007
Create Date: 2026-12-01
"""

from alembic import op

revision = "0008_i14"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_workflow_jobs_finished",
        "workflow_jobs",
        ["status", "finished_at"],
        postgresql_where="finished_at IS NOT NULL",
    )
    op.create_index(
        "ix_workflow_job_effects_orphaned",
        "workflow_job_effects",
        ["created_at"],
        postgresql_where="job_id IS NULL",
    )
    op.create_index("ix_operation_audit_created", "operation_audit", ["created_at"])
    op.create_index(
        "ix_workflow_signals_settled",
        "workflow_signals",
        ["resolved_at"],
        postgresql_where="state <> 'PENDING'",
    )


def downgrade() -> None:
    op.drop_index("ix_workflow_signals_settled", table_name="workflow_signals")
    op.drop_index("ix_operation_audit_created", table_name="operation_audit")
    op.drop_index("ix_workflow_job_effects_orphaned", table_name="workflow_job_effects")
    op.drop_index("ix_workflow_jobs_finished", table_name="workflow_jobs")
