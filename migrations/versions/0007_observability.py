"""Observability: the W3C traceparent of the span that enqueued a job, and each worker
node's own clock at its last heartbeat (``ledgerflow doctor`` compares it with the database's).

Both columns are nullable without a default: adding them rewrites nothing.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workflow_jobs", sa.Column("traceparent", sa.Text(), nullable=True))
    op.add_column(
        "workflow_worker_nodes", sa.Column("node_clock_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("workflow_worker_nodes", "node_clock_at")
    op.drop_column("workflow_jobs", "traceparent")
