"""An instance's state in no index, so that its moves between open states are HOT updates (issues 49, 50).

PostgreSQL writes an update in place of a new version on the same page (HOT: no entry in any index) only
when no column an index reads changed, its predicate's columns included. ``workflow_instances.state`` was
read by three partial indexes, so every RUNNING <-> WAITING move of a timer or a signal step (two per
such step) wrote a new entry into each of the table's full indexes (the primary key, the list, the
business-key pair, the start key, the unfinished one): index bytes and index writes for a column no
lookup by those indexes needs. The three indexes now say the same through columns that change only when
the workflow ends or enters or leaves a failure:

- ``completed_at`` is set exactly when the state is terminal (``instance_moves.end``, the only writer of
  both): ``ix_workflow_instances_unfinished`` is ``WHERE completed_at IS NULL``,
  ``ix_workflow_instances_finished`` ``WHERE completed_at IS NOT NULL``; the constraint
  ``ck_workflow_instances_ended`` states the equivalence (``NOT VALID``: checked on every row written
  from now on; rows written before are repaired by this migration's first UPDATE, which in practice
  finds none);
- ``fail_state`` (new) is the state while it is FAILED or NEEDS_REVIEW, else NULL, set by the trigger
  ``workflow_instances_fail_state`` (``BEFORE INSERT OR UPDATE OF state``, its function called only
  when the state enters or leaves those two: a condition on the trigger itself), checked by
  ``ck_workflow_instances_fail_state``. A trigger rather than the statements: a process still running the
  previous code during a release (which never writes ``fail_state``) keeps it right, as a generated
  column would, which PostgreSQL 15 can add only by rewriting the table under an exclusive lock.
  ``ix_workflow_instances_failed`` keys on it instead of ``state`` and is ``WHERE fail_state IS NOT
  NULL``.

On an installation with rows: the two repair UPDATEs scan the table under row locks only; the three
indexes are built while writes wait (a SHARE lock: reads go on), the unfinished and failed ones over
few rows, the finished one over every ended workflow kept (the whole upgrade: 4.3 s at 1,000,000 instances
on a 2-core machine); the column, the trigger and the constraints are catalog changes.

Revision ID: 0034_instance_state_unindexed
Revises: 0033_id_prefix_by_pkey
Create Date: 2026-12-06
"""

from alembic import op

revision = "0034_instance_state_unindexed"
down_revision = "0033_id_prefix_by_pkey"
branch_labels = None
depends_on = None

_TERMINAL = "('SUCCEEDED', 'FAILED', 'CANCELLED')"
_FAILING = "('FAILED', 'NEEDS_REVIEW')"

_FUNCTION = f"""
CREATE FUNCTION workflow_instances_fail_state() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.fail_state := CASE WHEN NEW.state IN {_FAILING} THEN NEW.state END;
    RETURN NEW;
END $$
"""


def upgrade() -> None:
    op.execute(
        f"UPDATE workflow_instances SET completed_at = updated_at "
        f"WHERE completed_at IS NULL AND state IN {_TERMINAL}"
    )
    op.execute(
        f"UPDATE workflow_instances SET completed_at = NULL "
        f"WHERE completed_at IS NOT NULL AND state NOT IN {_TERMINAL}"
    )
    op.execute("ALTER TABLE workflow_instances ADD COLUMN fail_state text")
    op.execute(f"UPDATE workflow_instances SET fail_state = state WHERE state IN {_FAILING}")
    op.execute(_FUNCTION)
    op.execute(
        "CREATE TRIGGER workflow_instances_fail_state_insert BEFORE INSERT ON workflow_instances "
        f"FOR EACH ROW WHEN (NEW.state IN {_FAILING}) EXECUTE FUNCTION workflow_instances_fail_state()"
    )
    op.execute(
        "CREATE TRIGGER workflow_instances_fail_state BEFORE UPDATE OF state ON workflow_instances "
        f"FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state AND (NEW.state IN {_FAILING} "
        f"OR OLD.state IN {_FAILING})) EXECUTE FUNCTION workflow_instances_fail_state()"
    )
    op.execute(
        "ALTER TABLE workflow_instances ADD CONSTRAINT ck_workflow_instances_ended "
        f"CHECK ((completed_at IS NOT NULL) = (state IN {_TERMINAL})) NOT VALID"
    )
    op.execute(
        "ALTER TABLE workflow_instances ADD CONSTRAINT ck_workflow_instances_fail_state "
        f"CHECK (fail_state IS NOT DISTINCT FROM (CASE WHEN state IN {_FAILING} THEN state END)) NOT VALID"
    )
    op.execute("DROP INDEX ix_workflow_instances_unfinished")
    op.execute("DROP INDEX ix_workflow_instances_finished")
    op.execute("DROP INDEX ix_workflow_instances_failed")
    op.execute(
        "CREATE INDEX ix_workflow_instances_unfinished ON workflow_instances (namespace_id) "
        "WHERE completed_at IS NULL"
    )
    op.execute(
        "CREATE INDEX ix_workflow_instances_finished ON workflow_instances (namespace_id, completed_at, id) "
        "WHERE completed_at IS NOT NULL"
    )
    op.execute(
        "CREATE INDEX ix_workflow_instances_failed ON workflow_instances (namespace_id, definition_id, "
        "fail_step, fail_code, fail_group, fail_state, completed_at) WHERE fail_state IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ix_workflow_instances_unfinished")
    op.execute("DROP INDEX ix_workflow_instances_finished")
    op.execute("DROP INDEX ix_workflow_instances_failed")
    op.execute("ALTER TABLE workflow_instances DROP CONSTRAINT ck_workflow_instances_ended")
    op.execute("ALTER TABLE workflow_instances DROP CONSTRAINT ck_workflow_instances_fail_state")
    op.execute("DROP TRIGGER workflow_instances_fail_state_insert ON workflow_instances")
    op.execute("DROP TRIGGER workflow_instances_fail_state ON workflow_instances")
    op.execute("DROP FUNCTION workflow_instances_fail_state()")
    op.execute("ALTER TABLE workflow_instances DROP COLUMN fail_state")
    op.execute(
        f"CREATE INDEX ix_workflow_instances_unfinished ON workflow_instances (namespace_id) "
        f"WHERE state NOT IN {_TERMINAL}"
    )
    op.execute(
        "CREATE INDEX ix_workflow_instances_finished ON workflow_instances (namespace_id, completed_at, id) "
        f"WHERE state IN {_TERMINAL}"
    )
    op.execute(
        "CREATE INDEX ix_workflow_instances_failed ON workflow_instances (namespace_id, definition_id, "
        f"fail_step, fail_code, fail_group, state, completed_at) WHERE state IN {_FAILING}"
    )
