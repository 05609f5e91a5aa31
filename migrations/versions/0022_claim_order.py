"""A task claim reads its queue's open tasks in claim order and stops at the tasks it takes (issue 27).

``ix_workflow_tasks_claim`` (open tasks by namespace, queue and creation time) gains ``id``, the claim's
tie-breaker: ``ORDER BY created_at, id LIMIT n`` is then read from the index in order, so a claim visits
the tasks it takes (and the claimed ones before them), not every open task of the namespace. The claim
used to read them all and sort them: with 300 open workflows its statement took 0.7 ms of PostgreSQL, and
it grew with the backlog. The quota check counts open tasks from the same index (its leading columns are
unchanged).

Built inside the migration's transaction, like the indexes of migrations 0017 and 0019: writes to
``workflow_tasks`` wait while it is built (a partial index: it holds only open tasks, but the build reads
the table).

Revision ID: 0022_claim_order
Revises: 0021_start_writes
Create Date: 2026-12-03
"""

from alembic import op

revision = "0022_claim_order"
down_revision = "0021_start_writes"
branch_labels = None
depends_on = None

_OPEN = "WHERE state IN ('PENDING', 'CLAIMED')"


def upgrade() -> None:
    op.execute("DROP INDEX ix_workflow_tasks_claim")
    op.execute(
        f"CREATE INDEX ix_workflow_tasks_claim ON workflow_tasks (namespace_id, queue, created_at, id) {_OPEN}"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ix_workflow_tasks_claim")
    op.execute(
        f"CREATE INDEX ix_workflow_tasks_claim ON workflow_tasks (namespace_id, queue, created_at) {_OPEN}"
    )
