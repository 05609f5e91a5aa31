"""Hostile tenants: platform-wide operator credentials, token expiry, an append-only
operation audit (like finished job attempts, enforced by the database), and a NOTIFY when a task
becomes claimable (``lf_task_ready``, payload ``namespace_id:queue``; sent at commit) so waiting
long-poll claims wake at once instead of polling the database.

``platform`` has a constant default and ``expires_at`` none: adding them rewrites nothing.

Revision ID: 0008_i9_security
Revises: 0008_i10_events
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_i9_security"
down_revision = "0008_i10_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "credentials", sa.Column("platform", sa.Boolean(), server_default=sa.text("false"), nullable=False)
    )
    op.add_column("credentials", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("""
        CREATE FUNCTION operation_audit_append_only() RETURNS trigger AS $$
        BEGIN
            RAISE EXCEPTION 'the operation audit is append-only (% of %)', TG_OP, OLD.id
                USING ERRCODE = 'check_violation';
        END $$ LANGUAGE plpgsql
    """)
    op.execute("""
        CREATE TRIGGER operation_audit_append_only
        BEFORE UPDATE OR DELETE ON operation_audit
        FOR EACH ROW EXECUTE FUNCTION operation_audit_append_only()
    """)
    op.execute("""
        CREATE FUNCTION workflow_tasks_notify_ready() RETURNS trigger AS $$
        BEGIN
            PERFORM pg_notify('lf_task_ready', NEW.namespace_id || ':' || NEW.queue);
            RETURN NULL;
        END $$ LANGUAGE plpgsql
    """)
    op.execute("""
        CREATE TRIGGER workflow_tasks_notify_ready
        AFTER INSERT OR UPDATE OF state ON workflow_tasks
        FOR EACH ROW WHEN (NEW.state = 'PENDING')
        EXECUTE FUNCTION workflow_tasks_notify_ready()
    """)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS workflow_tasks_notify_ready ON workflow_tasks")
    op.execute("DROP FUNCTION IF EXISTS workflow_tasks_notify_ready()")
    op.execute("DROP TRIGGER IF EXISTS operation_audit_append_only ON operation_audit")
    op.execute("DROP FUNCTION IF EXISTS operation_audit_append_only()")
    op.drop_column("credentials", "expires_at")
    op.drop_column("credentials", "platform")
