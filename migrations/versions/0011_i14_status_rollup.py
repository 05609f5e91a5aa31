"""Runtime status rollup (L-STATUS): ``workflow_attempt_minutes``, per minute and queue the attempts
started in that minute (count, failed, duration sum and samples, queue-wait histogram), filled by the
drain's rollup sweep so the last hour's figures never scan the whole hour of attempts.

Revision ID: 0011_i14
Revises: 0010_i14
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0011_i14"
down_revision = "0010_i14"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workflow_attempt_minutes",
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("duration_sum_ms", sa.BigInteger(), nullable=False),
        sa.Column("duration_n", sa.Integer(), nullable=False),
        sa.Column("wait_hist", ARRAY(sa.Integer()), nullable=False),
        sa.PrimaryKeyConstraint("minute", "queue"),
    )


def downgrade() -> None:
    op.drop_table("workflow_attempt_minutes")
