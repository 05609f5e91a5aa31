"""``ledger_run_leases``: one drain run at a time across all of its transactions, not only within each
one (issue 50: an operator's year at a million workflows a day).

The drain took a transaction-scoped advisory lock in each of its transactions, so two runs could not
write at the same moment, but a run that outlasts the drain interval (a retention backlog, paused three
times as long as each batch took) let the next run of the actor take the lock in its pauses: the two
runs' batches interleaved and the removal took twice the share of the server that
``LEDGERFLOW_RETENTION_PAUSE`` promises. A run now also holds a lease row, taken in its first transaction
and renewed in each later one (and every two seconds of its pauses), released at its end, and a row whose
holder stopped renewing it expires after six seconds (``app.ledger.drain``). A table, not a session-level
advisory lock: behind PgBouncer in transaction mode a session lock stays on whichever server connection
took it.

A new table only: no lock on another table.

Revision ID: 0039_drain_run_lease
Revises: 0038_event_batches_json
Create Date: 2026-12-06
"""

from alembic import op

revision = "0039_drain_run_lease"
down_revision = "0038_event_batches_json"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
CREATE TABLE ledger_run_leases (
    name text PRIMARY KEY,
    holder text NOT NULL,
    expires_at timestamptz NOT NULL
)"""
    )


def downgrade() -> None:
    op.execute("DROP TABLE ledger_run_leases")
