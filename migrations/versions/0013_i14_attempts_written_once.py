"""Attempt rows are written once (L-DATA-2).

Until now a claim inserted a ``running`` attempt row and the settle updated it: two writes, a dead
version per attempt, and a table kept at fillfactor 80 so that the update could stay on its page.
Now the running attempt lives on its job row (``attempt_id``, ``worker_id``, ``attempt_started_at``)
and the move that ends it (settle, reclaim, suspend, cancel) inserts the final attempt row from them
in the same statement (app/ledger/transitions/executor.py).

- ``workflow_jobs`` gains the three columns and ``ck_workflow_jobs_open_attempt`` (running exactly
  when an attempt is open).
- Running attempt rows move onto their job rows; the attempt table then holds final attempts only.
  Run this migration with the workers stopped (the release phase does): a worker of the previous
  version settling afterwards would close the job but find no running attempt row to close.
- ``workflow_job_executions`` is keyed by (job, generation, attempt): that unique key becomes the
  primary key and the index on ``id`` is dropped (``id`` is drawn from its sequence at claim and
  never looked up). ``lease_token`` becomes nullable (new rows leave it out), fillfactor back to 100.

Revision ID: 0013_i14
Revises: 0012_i14
Create Date: 2026-12-01
"""

from alembic import op

revision = "0013_i14"
down_revision = "0012_i14"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE workflow_jobs ADD COLUMN attempt_id bigint, ADD COLUMN worker_id text, "
        "ADD COLUMN attempt_started_at timestamptz"
    )
    op.execute(
        """
UPDATE workflow_jobs j
SET attempt_id = e.id, worker_id = e.worker_id, attempt_started_at = e.started_at
FROM workflow_job_executions e
WHERE e.job_id = j.id AND e.generation = j.generation AND e.attempt = j.attempts
  AND e.status = 'running' AND j.status = 'running'
"""
    )
    # a running job whose attempt row is missing (should not exist) still gets an open attempt
    op.execute(
        """
UPDATE workflow_jobs SET attempt_id = nextval('workflow_job_executions_id_seq'), attempt_started_at = updated_at
WHERE status = 'running' AND attempt_id IS NULL
"""
    )
    op.execute("DELETE FROM workflow_job_executions WHERE status = 'running'")
    op.execute(
        "ALTER TABLE workflow_jobs ADD CONSTRAINT ck_workflow_jobs_open_attempt "
        "CHECK ((status = 'running') = (attempt_id IS NOT NULL))"
    )
    op.execute("ALTER TABLE workflow_job_executions DROP CONSTRAINT workflow_job_executions_pkey")
    op.execute("ALTER TABLE workflow_job_executions DROP CONSTRAINT uq_workflow_job_executions_attempt")
    op.execute(
        "ALTER TABLE workflow_job_executions ADD CONSTRAINT workflow_job_executions_pkey "
        "PRIMARY KEY (job_id, generation, attempt)"
    )
    op.execute("ALTER TABLE workflow_job_executions ALTER COLUMN lease_token DROP NOT NULL")
    op.execute("ALTER TABLE workflow_job_executions RESET (fillfactor)")


def downgrade() -> None:
    op.execute("ALTER TABLE workflow_job_executions SET (fillfactor = 80)")
    op.execute(
        """
INSERT INTO workflow_job_executions (id, job_id, generation, attempt, status, lease_token, worker_id, request,
    due_at, started_at)
SELECT attempt_id, id, generation, attempts, 'running', lease_token, worker_id, payload, run_at,
       attempt_started_at
FROM workflow_jobs WHERE status = 'running'
"""
    )
    op.execute(
        "UPDATE workflow_job_executions SET lease_token = '00000000-0000-0000-0000-000000000000' "
        "WHERE lease_token IS NULL"
    )
    op.execute("ALTER TABLE workflow_job_executions ALTER COLUMN lease_token SET NOT NULL")
    op.execute("ALTER TABLE workflow_job_executions DROP CONSTRAINT workflow_job_executions_pkey")
    op.execute(
        "ALTER TABLE workflow_job_executions ADD CONSTRAINT uq_workflow_job_executions_attempt "
        "UNIQUE (job_id, generation, attempt)"
    )
    op.execute(
        "ALTER TABLE workflow_job_executions ADD CONSTRAINT workflow_job_executions_pkey PRIMARY KEY (id)"
    )
    op.execute("ALTER TABLE workflow_jobs DROP CONSTRAINT ck_workflow_jobs_open_attempt")
    op.execute(
        "ALTER TABLE workflow_jobs DROP COLUMN attempt_id, DROP COLUMN worker_id, DROP COLUMN attempt_started_at"
    )
