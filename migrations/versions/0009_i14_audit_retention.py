"""The operation audit is append-only and kept for its retention: the trigger now
lets exactly one path delete — the drain's retention sweep, which marks its transaction with
``SET LOCAL ledgerflow.retention = 'on'`` — and only rows older than 30 days whatever the configured
retention. Updates stay refused; deletes by anyone else stay refused.

Revision ID: 0009_i14
Revises: 0008_i9_security
Create Date: 2026-12-01
"""

from alembic import op

revision = "0009_i14"
down_revision = "0008_i9_security"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE OR REPLACE FUNCTION operation_audit_append_only() RETURNS trigger AS $$
        BEGIN
            IF TG_OP = 'DELETE' AND current_setting('ledgerflow.retention', true) = 'on'
               AND OLD.created_at < now() - interval '30 days' THEN
                RETURN OLD;
            END IF;
            RAISE EXCEPTION 'the operation audit is append-only (% of %)', TG_OP, OLD.id
                USING ERRCODE = 'check_violation';
        END $$ LANGUAGE plpgsql
    """)


def downgrade() -> None:
    op.execute("""
        CREATE OR REPLACE FUNCTION operation_audit_append_only() RETURNS trigger AS $$
        BEGIN
            RAISE EXCEPTION 'the operation audit is append-only (% of %)', TG_OP, OLD.id
                USING ERRCODE = 'check_violation';
        END $$ LANGUAGE plpgsql
    """)
