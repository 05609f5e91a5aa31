"""Hostile tenants (issue 9): platform-wide operator credentials, token expiry, an append-only
operation audit (like finished job attempts, enforced by the database).

``platform`` has a constant default and ``expires_at`` none: adding them rewrites nothing.

Revision ID: 0008_i9_security
Revises: 0007
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_i9_security"
down_revision = "0007"
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


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS operation_audit_append_only ON operation_audit")
    op.execute("DROP FUNCTION IF EXISTS operation_audit_append_only()")
    op.drop_column("credentials", "expires_at")
    op.drop_column("credentials", "platform")
