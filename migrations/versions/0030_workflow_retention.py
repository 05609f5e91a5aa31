"""Retention of finished workflows (issue 50): a hold, and the index the drain finds them by.

``workflow_instances.hold_until``: an operator's hold (``PUT /v1/workflows/{id}/hold``) keeps a finished
workflow at least until then, whatever its namespace's retention says. ``ix_workflow_instances_finished``
orders each namespace's finished instances by their end: the drain's ``retention_workflows`` sweep reads
the oldest ones of each namespace first and stops at its batch, and the console's overview reads the
newest (an unfinished instance is not in the index). Both are cheap to add: a nullable column without a
default rewrites nothing, and the index holds finished instances only.

Revision ID: 0030_workflow_retention
Revises: 0025_claim_by_start
Create Date: 2026-12-05
"""

from alembic import op

revision = "0030_workflow_retention"
down_revision = "0025_claim_by_start"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE workflow_instances ADD COLUMN hold_until timestamptz")
    op.execute(
        "CREATE INDEX ix_workflow_instances_finished ON workflow_instances (namespace_id, completed_at, id) "
        "WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ix_workflow_instances_finished")
    op.execute("ALTER TABLE workflow_instances DROP COLUMN hold_until")
