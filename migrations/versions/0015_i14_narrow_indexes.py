"""Narrower created and trace indexes on workflow_jobs.

Both indexes receive an entry for every version of a job row (insert, claim, settle: no update of a
job is HOT, because its status is indexed), so their entry size counts three times per job.

- ``ix_workflow_jobs_created`` drops the ``id`` tie-breaker: ``(created_at)`` only. The job list's
  ``ORDER BY created_at DESC, id DESC`` is an index scan plus an incremental sort of each group of
  equal ``created_at`` (the jobs of one transaction), and its keyset cursor ``(created_at, id) < (t,
  i)`` becomes the index condition ``created_at <= t``. The three versions of a job, and the jobs of
  one transaction, share their key, so B-tree deduplication keeps them in one posting list: 11 bytes
  per job against 40 in ``bench.bloat`` (see bench/README.md).
- ``ix_workflow_jobs_trace`` indexes ``hashtextextended(trace_id, 0)``, a bigint: a 16-byte entry
  instead of 24 for the 15-character prefix of migration 0014, and 64 bits of the id instead of 60.
  Every lookup states the hash and the whole id (``app.ledger.models.trace_is``), so a collision of
  hashes costs one heap row read, never a wrong answer.

Revision ID: 0015_i14
Revises: 0014_i14
Create Date: 2026-12-01
"""

from alembic import op

revision = "0015_i14"
down_revision = "0014_i14"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX ix_workflow_jobs_created")
    op.execute("CREATE INDEX ix_workflow_jobs_created ON workflow_jobs (created_at)")
    op.execute("DROP INDEX ix_workflow_jobs_trace")
    op.execute("CREATE INDEX ix_workflow_jobs_trace ON workflow_jobs (hashtextextended(trace_id, 0))")


def downgrade() -> None:
    op.execute("DROP INDEX ix_workflow_jobs_trace")
    op.execute("CREATE INDEX ix_workflow_jobs_trace ON workflow_jobs (left(trace_id, 15))")
    op.execute("DROP INDEX ix_workflow_jobs_created")
    op.execute("CREATE INDEX ix_workflow_jobs_created ON workflow_jobs (created_at, id)")
