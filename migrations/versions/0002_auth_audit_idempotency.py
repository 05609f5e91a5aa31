"""auth, audit, idempotency

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy import Text
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "namespaces",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", name="uq_namespaces_name"),
    )
    op.create_table(
        "credentials",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("token_hash", sa.Text(), nullable=False),
        sa.Column("token_prefix", sa.Text(), nullable=False),
        sa.Column("scopes", postgresql.ARRAY(Text()), nullable=False),
        sa.Column("queues", postgresql.ARRAY(Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["namespace_id"], ["namespaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash", name="uq_credentials_token_hash"),
    )
    op.create_index(
        "uq_credentials_live_name",
        "credentials",
        ["namespace_id", "name"],
        unique=True,
        postgresql_where=sa.text("revoked_at IS NULL"),
    )
    op.create_table(
        "operation_audit",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("namespace_id", sa.Text(), nullable=False),
        sa.Column("actor_id", sa.Text(), nullable=False),
        sa.Column("actor_name", sa.Text(), nullable=True),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("target_type", sa.Text(), nullable=False),
        sa.Column("target_id", sa.Text(), nullable=False),
        sa.Column("workflow_id", sa.Text(), nullable=True),
        sa.Column("operation_id", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("evidence_ref", sa.Text(), nullable=True),
        sa.Column("request_id", sa.Text(), nullable=True),
        sa.Column("before", postgresql.JSONB(astext_type=Text()), nullable=True),
        sa.Column("after", postgresql.JSONB(astext_type=Text()), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("clock_timestamp()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_operation_audit_ns_created", "operation_audit", ["namespace_id", "created_at", "id"], unique=False
    )
    op.create_index(
        "ix_operation_audit_target", "operation_audit", ["target_type", "target_id"], unique=False
    )
    op.create_index(
        "ix_operation_audit_workflow",
        "operation_audit",
        ["namespace_id", "workflow_id", "created_at", "id"],
        unique=False,
        postgresql_where=sa.text("workflow_id IS NOT NULL"),
    )
    op.create_table(
        "idempotency_receipts",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("route", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("octet_length(key) <= 128", name="ck_idempotency_receipts_key_length"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("scope", "route", "key", name="uq_idempotency_receipts_key"),
    )
    op.create_index("ix_idempotency_receipts_created", "idempotency_receipts", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_idempotency_receipts_created", table_name="idempotency_receipts")
    op.drop_table("idempotency_receipts")
    op.drop_index("ix_operation_audit_workflow", table_name="operation_audit")
    op.drop_index("ix_operation_audit_target", table_name="operation_audit")
    op.drop_index("ix_operation_audit_ns_created", table_name="operation_audit")
    op.drop_table("operation_audit")
    op.drop_index("uq_credentials_live_name", table_name="credentials")
    op.drop_table("credentials")
    op.drop_table("namespaces")
