"""An ended workflow is never paused (issue 45): the end of a workflow clears ``paused`` since this release
(``instance_moves.end``); this clears it on the workflows that ended paused before (a signal or a task
result that ended a paused workflow left ``paused: true`` for good, and RESUME then answered that the
workflow had ended). Data only; the downgrade leaves the rows as they are.

Revision ID: 0029_time_skip
Revises: 0026_task_result_key
Create Date: 2026-12-05
"""

from alembic import op

revision = "0029_time_skip"
down_revision = "0026_task_result_key"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "UPDATE workflow_instances SET paused = false, paused_at = NULL "
        "WHERE paused AND state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')"
    )


def downgrade() -> None:
    pass
