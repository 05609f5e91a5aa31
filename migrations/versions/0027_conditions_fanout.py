"""Fan-out over data (issue 44): a task that is one element of a TASK step's ``for_each`` carries the
element's index (``element``; NULL for every other task). The column is nullable and has no default:
adding it rewrites no row.

Revision ID: 0027_conditions_fanout
Revises: 0025_claim_by_start
Create Date: 2026-12-05
"""

from alembic import op

revision = "0027_conditions_fanout"
down_revision = "0026_operator_actions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE workflow_tasks ADD COLUMN element integer")


def downgrade() -> None:
    op.execute("ALTER TABLE workflow_tasks DROP COLUMN element")
