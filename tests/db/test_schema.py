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
