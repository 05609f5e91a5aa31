"""control, signals, compensation tasks

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "workflow_tasks", sa.Column("purpose", sa.Text(), server_default=sa.text("'STEP'"), nullable=False)
    )
    op.create_check_constraint(
        "ck_workflow_tasks_purpose", "workflow_tasks", "purpose IN ('STEP', 'COMPENSATION')"
    )
    op.create_table(
        "workflow_signals",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("instance_id", sa.Text(), nullable=False),
        sa.Column("revision", sa.BigInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("payload_version", sa.Text(), nullable=False),
        sa.Column("target_step_key", sa.Text(), nullable=False),
        sa.Column("target_activation_sequence", sa.BigInteger(), nullable=False),
        sa.Column("correlation_key", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("actor_id", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("evidence_ref", sa.Text(), nullable=True),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("disposition", sa.Text(), nullable=True),
        sa.Column("consumed_wait_id", sa.Text(), nullable=True),
        sa.Column(
            "accepted_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("clock_timestamp()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "state IN ('PENDING', 'CONSUMED', 'REJECTED', 'EXPIRED')", name="ck_workflow_signals_state"
        ),
        sa.ForeignKeyConstraint(["instance_id"], ["workflow_instances.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_workflow_signals_instance", "workflow_signals", ["instance_id", "accepted_at", "id"], unique=False
    )
    op.create_index(
        "ix_workflow_signals_pending",
        "workflow_signals",
        ["instance_id", "target_step_key", "target_activation_sequence"],
        unique=False,
        postgresql_where=sa.text("state = 'PENDING'"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_workflow_signals_pending",
        table_name="workflow_signals",
        postgresql_where=sa.text("state = 'PENDING'"),
    )
    op.drop_index("ix_workflow_signals_instance", table_name="workflow_signals")
    op.drop_table("workflow_signals")
    op.drop_constraint("ck_workflow_tasks_purpose", "workflow_tasks", type_="check")
    op.drop_column("workflow_tasks", "purpose")
