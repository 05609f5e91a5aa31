"""The trace index holds a prefix of the trace id.

``ix_workflow_jobs_trace`` indexed the whole 32-character trace id: a 48-byte entry per job version,
inserted at random places (trace ids are random), so pages stay about 70 % full: about 75 bytes per
job, the largest index of the ledger. The first 15 characters (60 random bits for the ledger's hex
ids) make a 24-byte entry; a lookup compares the prefix through the index and the whole id on the
row (``app.ledger.models.trace_is``).

Revision ID: 0014_i14
Revises: 0013_i14
Create Date: 2026-12-01
"""

from alembic import op

revision = "0014_i14"
down_revision = "0013_i14"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX ix_workflow_jobs_trace")
    op.execute("CREATE INDEX ix_workflow_jobs_trace ON workflow_jobs (left(trace_id, 15))")


def downgrade() -> None:
    op.execute("DROP INDEX ix_workflow_jobs_trace")
    op.execute("CREATE INDEX ix_workflow_jobs_trace ON workflow_jobs (trace_id)")
