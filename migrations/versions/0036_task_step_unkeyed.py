"""A task names its step without a foreign key (issue 49): ``workflow_tasks_step_id_fkey`` (checked at
commit, migration 0020) and the index its check on a step's removal needed (``ix_workflow_tasks_step``,
migration 0032) are dropped.

The key's check at each task's commit locked the step's row ``FOR KEY SHARE`` (a WAL record: 2 per TASK ->
TIMER -> TASK workflow) and its index took an entry at every version of every task (6 of the ~99 index
entries such a workflow writes; ~190 bytes on disk per workflow). A task's step is the step that inserted
it, in the same transaction, under its instance's lock, and the two go together: retention removes a
workflow's tasks and steps in one statement (``app.engine.retention``), and the task's key to its instance
(``workflow_tasks_instance_id_fkey``) stays. The history of a step's task rounds reads the instance's tasks
by ``ix_workflow_tasks_instance`` and the step's key.

Catalog changes only, whatever the table's size.

Revision ID: 0036_task_step_unkeyed
Revises: 0035_definitions_unlocked
Create Date: 2026-12-06
"""

from alembic import op

revision = "0036_task_step_unkeyed"
down_revision = "0035_definitions_unlocked"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE workflow_tasks DROP CONSTRAINT workflow_tasks_step_id_fkey")
    op.execute("DROP INDEX ix_workflow_tasks_step")


def downgrade() -> None:
    op.execute("CREATE INDEX ix_workflow_tasks_step ON workflow_tasks (step_id)")
    op.execute(
        "ALTER TABLE workflow_tasks ADD CONSTRAINT workflow_tasks_step_id_fkey FOREIGN KEY (step_id) "
        "REFERENCES workflow_steps (id) DEFERRABLE INITIALLY DEFERRED"
    )
