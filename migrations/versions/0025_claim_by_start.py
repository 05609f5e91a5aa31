"""A task claim serves the workflows started first (issue 27): open tasks are claimed in the order of
their instance's creation, then their own.

A claim took a queue's open tasks by the task's creation time. Under a backlog, the next step of a workflow
started long ago then queued behind the first steps of every workflow started since: with 300 workflows
started at once, each workflow ended only when nearly all of them did (``make bench``: ten TASKs in a chain,
latency p50 8.5 s for a run of 10 s). Now a task carries its instance's ``created_at``
(``instance_created_at``, written with the task) and ``ix_workflow_tasks_claim`` orders the open tasks by it,
then by their own creation and id: a workflow's next step goes before the steps of younger workflows, as a
durable-function engine that runs a workflow to its end would, and a queue still never starves (an instance's
creation time is fixed; a young workflow waits only for open tasks of older ones).

Only the open tasks (the index's rows) are filled from their instances; a closed task keeps NULL (the value
orders nothing once a task is closed, and the history is not rewritten). The index is rebuilt inside the
migration's transaction, like migration 0022's: writes to ``workflow_tasks`` wait while it is built.

Revision ID: 0025_claim_by_start
Revises: 0024_credentials_notify
Create Date: 2026-12-04
"""

from alembic import op

revision = "0025_claim_by_start"
down_revision = "0024_credentials_notify"
branch_labels = None
depends_on = None

_OPEN = "WHERE state IN ('PENDING', 'CLAIMED')"


def upgrade() -> None:
    op.execute("ALTER TABLE workflow_tasks ADD COLUMN instance_created_at timestamptz")
    op.execute(
        "UPDATE workflow_tasks t SET instance_created_at = i.created_at FROM workflow_instances i "
        "WHERE i.id = t.instance_id AND t.state IN ('PENDING', 'CLAIMED')"
    )
    op.execute("DROP INDEX ix_workflow_tasks_claim")
    op.execute(
        "CREATE INDEX ix_workflow_tasks_claim ON workflow_tasks "
        f"(namespace_id, queue, instance_created_at, created_at, id) {_OPEN}"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ix_workflow_tasks_claim")
    op.execute(
        f"CREATE INDEX ix_workflow_tasks_claim ON workflow_tasks (namespace_id, queue, created_at, id) {_OPEN}"
    )
    op.execute("ALTER TABLE workflow_tasks DROP COLUMN instance_created_at")
