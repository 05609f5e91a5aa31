"""The job ledger (SPEC L-*): Postgres is the only source of truth."""
