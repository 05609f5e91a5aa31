"""The quota check counts open tasks from their rows: no quota row is written when a task opens or closes.

``workflow_quota_counts`` keeps only the unfinished instances per namespace and stripe, written at an
instance's start and end; ``open_tasks`` and ``open_by_queue`` are dropped. A start's check counts the
namespace's open (PENDING or CLAIMED) tasks, and each queue's, from ``ix_workflow_tasks_claim`` (the
claim path's partial index on open tasks by namespace and queue), each count stopped at its cap
(``app.engine.quotas``). A task's creation, claim or close writes no quota row (issue 27).

The downgrade adds the two columns back and fills them from the rows (tasks locked against writers
meanwhile), as migration 0018_i27 left them.

Revision ID: 0019_quota_tasks
Revises: 0019_claimkey
Create Date: 2026-12-03
"""

from alembic import op

revision = "0019_quota_tasks"
down_revision = "0019_claimkey"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE workflow_quota_counts DROP COLUMN open_tasks, DROP COLUMN open_by_queue")


def downgrade() -> None:
    op.execute("LOCK TABLE workflow_tasks IN SHARE MODE")
    op.execute(
        "ALTER TABLE workflow_quota_counts ADD COLUMN open_tasks bigint NOT NULL DEFAULT 0, "
        "ADD COLUMN open_by_queue jsonb NOT NULL DEFAULT '{}'::jsonb"
    )
    op.execute(
        """
INSERT INTO workflow_quota_counts AS c (namespace_id, stripe, open_tasks, open_by_queue)
SELECT namespace_id, 0, sum(n), jsonb_object_agg(queue, n) FROM (
    SELECT namespace_id, queue, count(*) AS n FROM workflow_tasks WHERE state IN ('PENDING', 'CLAIMED')
    GROUP BY namespace_id, queue) q
GROUP BY namespace_id
ON CONFLICT (namespace_id, stripe) DO UPDATE SET open_tasks = EXCLUDED.open_tasks,
    open_by_queue = EXCLUDED.open_by_queue
"""
    )
