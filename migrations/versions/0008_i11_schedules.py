"""Schedules and TRIGGER steps (X-SCHED): the TRIGGER step kind, the schedule rules, their fires, and the schedule that launched an
instance (``workflow_instances.schedule_id`` / ``schedule_fire_at``, nullable: adding them rewrites
nothing).

Revision ID: 0008_i11
Revises: 0008_i14
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008_i11"
down_revision = "0008_i14"
branch_labels = None
depends_on = None


KINDS_BEFORE = "'ROOT', 'TASK', 'SIGNAL', 'TIMER', 'POLL', 'SUBWORKFLOW'"


def upgrade() -> None:
    # TRIGGER steps: one more step kind
    op.drop_constraint("ck_workflow_steps_kind", "workflow_steps", type_="check")
    op.create_check_constraint(
        "ck_workflow_steps_kind", "workflow_steps", f"kind IN ({KINDS_BEFORE}, 'TRIGGER')"
    )
    op.add_column("workflow_instances", sa.Column("schedule_id", sa.Text(), nullable=True))
    op.add_column(
        "workflow_instances", sa.Column("schedule_fire_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.create_index(
        "ix_workflow_instances_schedule",
        "workflow_instances",
        ["schedule_id", "created_at"],
        postgresql_where=sa.text("schedule_id IS NOT NULL"),
    )
    op.create_table(
        "workflow_schedules",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("definition_id", sa.Text(), sa.ForeignKey("workflow_definitions.id"), nullable=False),
        sa.Column("version", sa.Text(), nullable=False),
        sa.Column("input", postgresql.JSONB(), nullable=False),
        sa.Column("fire_time_field", sa.Text()),
        sa.Column("cron", sa.Text()),
        sa.Column("timezone", sa.Text(), nullable=False, server_default=sa.text("'UTC'")),
        sa.Column("interval_seconds", sa.Integer()),
        sa.Column("anchor_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("overlap", sa.Text(), nullable=False, server_default=sa.text("'skip'")),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("next_fire_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False, server_default=sa.text("1")),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("(cron IS NULL) <> (interval_seconds IS NULL)", name="ck_workflow_schedules_rule"),
        sa.CheckConstraint(
            "overlap IN ('skip', 'allow', 'cancel_previous')", name="ck_workflow_schedules_overlap"
        ),
        sa.UniqueConstraint("namespace_id", "name", name="uq_workflow_schedules_name"),
    )
    op.create_index(
        "ix_workflow_schedules_due",
        "workflow_schedules",
        ["next_fire_at"],
        postgresql_where=sa.text("NOT paused"),
    )
    op.create_index("ix_workflow_schedules_list", "workflow_schedules", ["namespace_id", "created_at", "id"])
    op.create_table(
        "workflow_schedule_fires",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column(
            "schedule_id",
            sa.Text(),
            sa.ForeignKey("workflow_schedules.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("fire_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text()),
        sa.Column("skipped_count", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("skipped_capped", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("instance_id", sa.Text()),
        sa.Column("job_id", sa.BigInteger()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("status IN ('LAUNCHED', 'SKIPPED')", name="ck_workflow_schedule_fires_status"),
        sa.CheckConstraint("kind IN ('SCHEDULED', 'MANUAL')", name="ck_workflow_schedule_fires_kind"),
        sa.UniqueConstraint("schedule_id", "fire_at", name="uq_workflow_schedule_fires_time"),
    )


def downgrade() -> None:
    op.drop_table("workflow_schedule_fires")
    op.drop_table("workflow_schedules")
    op.drop_index("ix_workflow_instances_schedule", table_name="workflow_instances")
    op.drop_column("workflow_instances", "schedule_fire_at")
    op.drop_column("workflow_instances", "schedule_id")
    op.drop_constraint("ck_workflow_steps_kind", "workflow_steps", type_="check")
    op.create_check_constraint("ck_workflow_steps_kind", "workflow_steps", f"kind IN ({KINDS_BEFORE})")
