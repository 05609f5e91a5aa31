"""The id-prefix search reads the primary key (issue 50): ``ix_workflow_instances_id_prefix`` (``id
text_pattern_ops``, migration 0026) duplicated ``workflow_instances_pkey`` entry for entry, ~110 bytes per
workflow, and the planner answered ``id = $1`` lookups from either. A prefix ``p`` of the 32-hex ids is now
the range ``p <= id < p || 'g'`` of the primary key (every id is lowercase hex, which sorts in byte order in
every collation PostgreSQL offers here), with the ``LIKE`` kept as the exact check (``app.engine.finding``).

Revision ID: 0033_id_prefix_by_pkey
Revises: 0032_fk_indexes
Create Date: 2026-12-05
"""

from alembic import op

revision = "0033_id_prefix_by_pkey"
down_revision = "0032_fk_indexes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_workflow_instances_id_prefix")


def downgrade() -> None:
    op.execute("CREATE INDEX ix_workflow_instances_id_prefix ON workflow_instances (id text_pattern_ops)")
