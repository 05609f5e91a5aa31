"""A task's result keeps its Idempotency-Key (issue 48): ``workflow_tasks.result_key``.

``POST /v1/tasks/{id}/complete`` and ``/fail`` store no receipt row: the ended task (state, epoch, output or
error) is the record, and a resend of the result that was applied answers it again. A resend with the same
key and another body (another output, error or epoch) could not be told from another request and was
refused as one (409 STATE_CONFLICT); the seed pairs "the request changed under the original key" with 409
IDEMPOTENCY_CONFLICT, as every other route answers. The key of the result that ended the claim is now
written with it (NULL: a result without a key of its own, a batch item, a time-out, or ended before this
migration), so that request is told apart. A nullable column without a default: no table rewrite.

Revision ID: 0026_task_result_key
Revises: 0030_workflow_retention
Create Date: 2026-12-05
"""

from alembic import op

revision = "0026_task_result_key"
down_revision = "0030_workflow_retention"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE workflow_tasks ADD COLUMN result_key text")


def downgrade() -> None:
    op.execute("ALTER TABLE workflow_tasks DROP COLUMN result_key")
