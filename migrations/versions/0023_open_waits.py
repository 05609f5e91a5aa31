"""An instance's WAITING waits are found by an index (issue 27).

``ix_workflow_waits_open`` (instance_id) over WAITING waits. The end of every instance cancels its waiting
waits (``wait_moves.cancel_open``) and checks for them (``store.open_work``); with only the primary key and
the activation's unique key on the table, that UPDATE read every wait of every tenant, so each workflow's end
cost a sequential scan that grew with all the waits kept until retention. A partial index: it holds the
waits still waiting, a few per waiting instance.

Built inside the migration's transaction, like the indexes of migrations 0017, 0019 and 0022.

Revision ID: 0023_open_waits
Revises: 0022_claim_order
Create Date: 2026-12-03
"""

from alembic import op

revision = "0023_open_waits"
down_revision = "0022_claim_order"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX ix_workflow_waits_open ON workflow_waits (instance_id) WHERE state = 'WAITING'")


def downgrade() -> None:
    op.execute("DROP INDEX ix_workflow_waits_open")
