"""The migrated schema matches the models (procrastinate-style migration test)."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app.schema import metadata


def test_migrated_schema_matches_models(engine):
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_server_default": True})
        diff = compare_metadata(ctx, metadata)
    assert diff == [], f"migrations and models differ: {diff}"


def test_finished_attempts_are_immutable(db):
    import pytest
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, max_attempts, operation_key, trace_id) "
                "VALUES ('delay_wake', 'workflow-ledger', 3, 'op', 't')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO workflow_job_executions (job_id, generation, attempt, status, lease_token, due_at) "
                "VALUES (1, 1, 1, 'succeeded', gen_random_uuid(), now())"
            )
        )
    with pytest.raises(DBAPIError, match="immutable"), db.begin() as conn:
        conn.execute(text("UPDATE workflow_job_executions SET error = 'rewritten' WHERE id = 1"))


def test_rolled_back_transaction_leaves_no_hint_state_behind(db):
    """Regression: a rollback used to leave the per-connection hint set behind, so the next
    transaction on the same pooled connection published nothing."""
    from app.db import transaction
    from app.ledger import hints
    from app.ledger.enqueue import enqueue

    sent: list[str] = []
    hints.set_publisher(sent.append)
    try:

        class Boom(Exception):
            pass

        try:
            with transaction(db) as conn:
                enqueue(conn, "delay_wake", {})
                raise Boom
        except Boom:
            pass
        assert sent == []
        for _ in range(3):  # whichever pooled connection comes back, the hint must go out
            with transaction(db) as conn:
                enqueue(conn, "delay_wake", {})
        assert sent == ["workflow-ledger"] * 3
    finally:
        hints.set_publisher(None)


def test_the_churning_ledger_tables_declare_their_own_vacuum_thresholds(engine):
    """Autovacuum stays at the server's defaults; the job and attempt tables ask for a vacuum after
    1,000 + 1 % dead rows instead of 20 % (migration 0012_i14), so a week of history does not hold
    a fifth of its size in dead versions between two vacuums."""
    from sqlalchemy import text

    with engine.connect() as conn:
        rows = dict(
            conn.execute(
                text(
                    "SELECT relname, reloptions FROM pg_class "
                    "WHERE relname IN ('workflow_jobs', 'workflow_job_executions')"
                )
            ).all()
        )
    for table in ("workflow_jobs", "workflow_job_executions"):
        options = dict(o.split("=", 1) for o in rows[table])
        assert options["autovacuum_vacuum_scale_factor"] == "0.01", table
        assert options["autovacuum_vacuum_threshold"] == "1000", table
        assert options["autovacuum_vacuum_insert_scale_factor"] == "0.05", table
