"""The fault suite's own business table (the receipt-guarded effect its outbound handler writes)."""

EFFECTS_DDL = "CREATE TABLE IF NOT EXISTS chaos_effects (operation_key text NOT NULL, job_id bigint NOT NULL)"
