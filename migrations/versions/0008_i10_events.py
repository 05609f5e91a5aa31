"""X-EVENT, X-AUTO: the workflow events outbox, event subscriptions and webhook deliveries, automation rules
and their executions.

Revision ID: 0008_i10_events
Revises: 0008_i11
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

revision = "0008_i10_events"
down_revision = "0008_i11"
branch_labels = None
depends_on = None

_NOW = sa.text("now()")


def _times() -> list[sa.Column]:
    return [
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    ]


def upgrade() -> None:
    op.add_column(
        "workflow_instances",
        sa.Column("event_seq", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    op.create_table(
        "workflow_events",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("instance_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("definition_id", sa.Text(), nullable=False),
        sa.Column("body", JSONB(), nullable=False),
        sa.Column("dispatch_job_id", sa.BigInteger()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
        sa.UniqueConstraint("instance_id", "seq", name="uq_workflow_events_instance_seq"),
    )
    op.create_index(
        "ix_workflow_events_dispatch",
        "workflow_events",
        ["dispatch_job_id"],
        postgresql_where=sa.text("dispatch_job_id IS NOT NULL"),
    )
    op.create_table(
        "event_subscriptions",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("event_types", ARRAY(sa.Text()), nullable=False),
        sa.Column("definition_id", sa.Text()),
        sa.Column("description", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous_secret", sa.Text()),
        sa.Column("previous_secret_expires_at", sa.DateTime(timezone=True)),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default=sa.text("true")),
        sa.Column("disabled_reason", sa.Text()),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("revision", sa.BigInteger(), nullable=False, server_default=sa.text("1")),
        *_times(),
    )
    op.create_index("ix_event_subscriptions_ns", "event_subscriptions", ["namespace_id", "created_at", "id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("subscription_id", sa.Text(), nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("job_id", sa.BigInteger()),
        sa.Column("status", sa.Text(), nullable=False, server_default=sa.text("'pending'")),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("redeliveries", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("response_code", sa.Integer()),
        sa.Column("latency_ms", sa.Integer()),
        sa.Column("last_error", sa.Text()),
        sa.Column("receipt", JSONB()),
        *_times(),
        sa.UniqueConstraint("event_id", "subscription_id", name="uq_webhook_deliveries_pair"),
    )
    op.create_index(
        "ix_webhook_deliveries_sub", "webhook_deliveries", ["subscription_id", "created_at", "id"]
    )
    op.create_table(
        "automation_rules",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("definition_id", sa.Text()),
        sa.Column("conditions", JSONB(), nullable=False),
        sa.Column("action", JSONB(), nullable=False),
        sa.Column("secret", sa.Text()),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default=sa.text("true")),
        sa.Column("revision", sa.BigInteger(), nullable=False, server_default=sa.text("1")),
        *_times(),
    )
    op.create_index("ix_automation_rules_ns", "automation_rules", ["namespace_id", "created_at", "id"])
    op.create_table(
        "automation_executions",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("rule_id", sa.Text(), nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("job_id", sa.BigInteger()),
        sa.Column("status", sa.Text(), nullable=False, server_default=sa.text("'pending'")),
        sa.Column("result", JSONB()),
        sa.Column("last_error", sa.Text()),
        *_times(),
        sa.UniqueConstraint("rule_id", "event_id", name="uq_automation_executions_pair"),
    )
    op.create_index("ix_automation_executions_rule", "automation_executions", ["rule_id", "created_at", "id"])


def downgrade() -> None:
    for table in (
        "automation_executions",
        "automation_rules",
        "webhook_deliveries",
        "event_subscriptions",
        "workflow_events",
    ):
        op.drop_table(table)
    op.drop_column("workflow_instances", "event_seq")
