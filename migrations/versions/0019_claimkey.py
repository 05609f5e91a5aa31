"""A task claim keeps its Idempotency-Key on the tasks it claimed, not in a receipt row (issue 27).

- ``workflow_tasks.claim_key`` / ``claim_fingerprint``: the Idempotency-Key of the claim request that
  holds the task's current epoch, and the fingerprint of that request (method, path and body). Every
  claim sets both (a claim without a key, the console's, sets them NULL), so the rows that carry a key
  are exactly the tasks that claim returned, each at the epoch it gave. A resent claim with the same key
  answers them again; with another body it is refused (409 IDEMPOTENCY_CONFLICT); no
  ``idempotency_receipts`` row is written for a claim any more.
- ``ix_workflow_tasks_claim_key``: (namespace_id, claim_key) of the tasks that carry a key.

Both columns are added without a default: no table rewrite. Existing claims keep their receipts (they
expire after 24 h as before).

Revision ID: 0019_claimkey
Revises: 0018_i28
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0019_claimkey"
down_revision = "0018_i28"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workflow_tasks", sa.Column("claim_key", sa.Text()))
    op.add_column("workflow_tasks", sa.Column("claim_fingerprint", sa.Text()))
    op.create_index(
        "ix_workflow_tasks_claim_key",
        "workflow_tasks",
        ["namespace_id", "claim_key"],
        postgresql_where=sa.text("claim_key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_workflow_tasks_claim_key", table_name="workflow_tasks")
    op.drop_column("workflow_tasks", "claim_fingerprint")
    op.drop_column("workflow_tasks", "claim_key")
