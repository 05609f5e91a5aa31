"""Fan-out over data, part two (issue 44): a SUBWORKFLOW step with ``for_each`` starts one child workflow per
element, and an element's retry follows its step's retry backoff.

- ``workflow_instances.parent_activation_id`` / ``parent_element``: the parent step's activation and the
  element index of a child started by a fan-out (NULL for every other instance, a plain child included);
  ``ix_workflow_instances_fanout`` finds an activation's children in element order (it holds those rows only).
- ``workflow_tasks.next_attempt_at``: on an element's failed task, when its next attempt starts (a retry
  with a backoff; NULL otherwise): the element counts as running meanwhile.

Nullable columns without a default rewrite no row; the partial index holds fan-out children only.

Revision ID: 0031_fanout_children
Revises: 0027_conditions_fanout
Create Date: 2026-12-05
"""

from alembic import op

revision = "0031_fanout_children"
down_revision = "0027_conditions_fanout"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE workflow_instances ADD COLUMN parent_activation_id text")
    op.execute("ALTER TABLE workflow_instances ADD COLUMN parent_element integer")
    op.execute(
        "CREATE INDEX ix_workflow_instances_fanout ON workflow_instances (parent_activation_id, parent_element) "
        "WHERE parent_activation_id IS NOT NULL"
    )
    op.execute("ALTER TABLE workflow_tasks ADD COLUMN next_attempt_at timestamptz")


def downgrade() -> None:
    op.execute("ALTER TABLE workflow_tasks DROP COLUMN next_attempt_at")
    op.execute("DROP INDEX ix_workflow_instances_fanout")
    op.execute("ALTER TABLE workflow_instances DROP COLUMN parent_element")
    op.execute("ALTER TABLE workflow_instances DROP COLUMN parent_activation_id")
