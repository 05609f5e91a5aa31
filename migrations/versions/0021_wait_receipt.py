"""A wait records the operation that resolved or expired it: the wait row is the receipt of a timer's
firing and of a signal wait's timeout.

A ``delay_wake`` job that fires a TIMER step (or times a SIGNAL wait out) moved the wait WAITING ->
RESOLVED (EXPIRED) in a guarded UPDATE and, beside it, inserted a ``workflow_job_effects`` row so that a
retry of the same operation would reuse the result instead of advancing again (L-EFFECT-1). The UPDATE
now also sets ``resolved_by_operation`` to the job's operation key, and a retry of that operation finds
its own key on the wait (``app.engine.handlers.timers.WaitReceipt``): no receipt row is written.

A nullable column without a default: adding it changes no stored row. Waits ended before it stay NULL:
a retry of such a wait's job (a rare job whose settle was lost across the deploy) finds no record on the
wait, runs the wake, finds the wait ended and answers "skipped"; the effect is not repeated.

Revision ID: 0021_wait_receipt
Revises: 0020_lazy_steps
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0021_wait_receipt"
down_revision = "0020_lazy_steps"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workflow_waits", sa.Column("resolved_by_operation", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("workflow_waits", "resolved_by_operation")
