"""An index for every foreign key whose referenced rows are deleted (issue 50): the removal of finished
workflows (``retention_workflows``) and of finished jobs (``retention_jobs``) made PostgreSQL check each
deleted row's foreign keys by a sequential scan of the referencing table, so that a batch cost rows times
table size (a batch of 5,000 workflows ran more than 4 minutes at 100,000 workflows).

- ``ix_workflow_tasks_step (step_id)``: deleting a step checks ``workflow_tasks.step_id``;
- ``ix_workflow_waits_instance (instance_id)`` replaces ``ix_workflow_waits_open (instance_id) WHERE state =
  'WAITING'``: deleting an instance checks ``workflow_waits.instance_id``, which a partial index cannot
  answer. The same index serves the cancel of an instance's open waits, and with ``state`` in no index
  predicate any more, a wait's resolve may be a HOT update (no index write);
- ``ix_workflow_job_effects_job (job_id) WHERE job_id IS NOT NULL``: deleting a job sets the ``job_id`` of
  its effects to NULL (``ON DELETE SET NULL``); ``job_id = $1`` implies the predicate, so the check reads it.

The foreign keys into tables the product never deletes from (namespaces, definitions and their versions)
have no index (``tests/db/test_schema.py`` lists them). The indexes are built in the migration's one
transaction, as every index of the project's migrations: writes to the three tables wait for the build
(about a second per million rows).

Revision ID: 0032_fk_indexes
Revises: 0031_history_partitions
Create Date: 2026-12-05
"""

from alembic import op

revision = "0032_fk_indexes"
down_revision = "0031_history_partitions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX ix_workflow_tasks_step ON workflow_tasks (step_id)")
    op.execute("CREATE INDEX ix_workflow_waits_instance ON workflow_waits (instance_id)")
    op.execute("DROP INDEX ix_workflow_waits_open")
    op.execute(
        "CREATE INDEX ix_workflow_job_effects_job ON workflow_job_effects (job_id) WHERE job_id IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ix_workflow_job_effects_job")
    op.execute("CREATE INDEX ix_workflow_waits_open ON workflow_waits (instance_id) WHERE state = 'WAITING'")
    op.execute("DROP INDEX ix_workflow_waits_instance")
    op.execute("DROP INDEX ix_workflow_tasks_step")
