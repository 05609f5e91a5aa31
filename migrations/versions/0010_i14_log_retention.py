"""Retention of the outbox and the integrations' logs: indexes by age for the drain's
sweeps of ``workflow_events``, ``webhook_deliveries`` and ``automation_executions``.

Revision ID: 0010_i14
Revises: 0009_i14
Create Date: 2026-12-01
"""

from alembic import op

revision = "0010_i14"
down_revision = "0009_i14"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_workflow_events_created", "workflow_events", ["created_at"])
    op.create_index("ix_webhook_deliveries_created", "webhook_deliveries", ["created_at"])
    op.create_index("ix_automation_executions_created", "automation_executions", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_automation_executions_created", table_name="automation_executions")
    op.drop_index("ix_webhook_deliveries_created", table_name="webhook_deliveries")
    op.drop_index("ix_workflow_events_created", table_name="workflow_events")
