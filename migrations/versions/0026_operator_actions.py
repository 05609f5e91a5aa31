"""Operators act on workflows (issue 47): reruns, prefix search, traced failures, failure groups.

- ``workflow_reruns``: one row per rerun (the new instance, the instance it reruns, the step it reran from,
  the reason and who asked); read both ways (``rerun_of`` by the new instance's id, ``reruns`` through
  ``ix_workflow_reruns_of``). ``workflow_steps.copied_from`` names the instance whose step output a rerun
  copied (NULL for a step that ran).
- ``workflow_tasks.worker``: the identity (host, pid, SDK) of the worker that claimed the attempt last;
  ``workflow_tasks.failure``: the failure a worker reported for the attempt (exception type, message, a
  bounded stack trace, its identity). Both NULL until a worker sends them.
- Search by what operators see: an index on the instance id with ``text_pattern_ops`` (a prefix of at least
  8 hex characters is a range scan) and one on the namespace and the lower-cased business key (a prefix in
  any case).
- Failure groups: the FAILED and NEEDS_REVIEW instances of a namespace by definition, failing step, error
  code and normalised message. The three keys are generated columns of the instance (``fail_step``,
  ``fail_code``, ``fail_group``: PostgreSQL computes them from ``error`` at each write of the row; the
  normalisation below is ``app.engine.finding.ERROR_GROUP_SQL``, written out so that this migration never
  changes: ``tests/unit/test_failure_group_index.py`` compares them), so that the groups are counted from a
  partial index alone (an index-only scan; PostgreSQL does not read an index of expressions only). Adding
  them rewrites ``workflow_instances`` once.

The indexes are built inside the migration's transaction (writes to ``workflow_instances`` wait).

Revision ID: 0026_operator_actions
Revises: 0025_claim_by_start
Create Date: 2026-12-05
"""

from alembic import op

revision = "0026_operator_actions"
down_revision = "0029_time_skip"
branch_labels = None
depends_on = None

# ``app.engine.finding.ERROR_GROUP_SQL`` as of this revision (the ledger's failure-cluster normalisation)
ERROR_GROUP = "left(btrim(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(COALESCE(error->>'message', ''), E'''[^'']*''', E'''<str>''', 'g'), E'\"[^\"]*\"', E'\"<str>\"', 'g'), E'([A-Za-z][A-Za-z0-9+.-]*)://[^/\\\\s:?#]+(:[0-9]+)?', E'\\\\1://<host>', 'g'), E'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', E'<id>', 'g'), E'\\\\m[0-9]{1,3}(\\\\.[0-9]{1,3}){3}(:[0-9]+)?\\\\M', E'<ip>', 'g'), E'\\\\m(0x)?[0-9a-fA-F]{8,}\\\\M', E'<id>', 'g'), E'[0-9]+(\\\\.[0-9]+)?', E'<n>', 'g'), E'\\\\s+', E' ', 'g')), 300)"


def upgrade() -> None:
    # an earlier migration of the same upgrade may have left deferred foreign-key checks pending on
    # workflow_steps (0020 deletes BLOCKED rows that tasks may reference, checked at commit); PostgreSQL
    # refuses to ALTER a table with pending trigger events, so they are checked here, now
    op.execute("SET CONSTRAINTS ALL IMMEDIATE")
    op.execute(
        """
CREATE TABLE workflow_reruns (
    instance_id text PRIMARY KEY REFERENCES workflow_instances (id),
    namespace_id text NOT NULL,
    rerun_of text NOT NULL REFERENCES workflow_instances (id),
    from_step text,
    reason text NOT NULL,
    actor_id text NOT NULL,
    copied_steps text[] NOT NULL DEFAULT '{}'::text[],
    created_at timestamptz NOT NULL DEFAULT now()
)"""
    )
    op.execute("CREATE INDEX ix_workflow_reruns_of ON workflow_reruns (rerun_of, created_at)")
    op.execute("ALTER TABLE workflow_steps ADD COLUMN copied_from text")
    op.execute("ALTER TABLE workflow_tasks ADD COLUMN worker jsonb")
    op.execute("ALTER TABLE workflow_tasks ADD COLUMN failure jsonb")
    op.execute("CREATE INDEX ix_workflow_instances_id_prefix ON workflow_instances (id text_pattern_ops)")
    op.execute(
        "CREATE INDEX ix_workflow_instances_key_lower ON workflow_instances "
        "(namespace_id, lower(business_key) text_pattern_ops)"
    )
    # the failure group's keys, kept by PostgreSQL on every write of the row (a NULL error: NULL, NULL, '')
    op.execute(
        "ALTER TABLE workflow_instances ADD COLUMN fail_step text GENERATED ALWAYS AS (error->>'step_key') STORED"
    )
    op.execute(
        "ALTER TABLE workflow_instances ADD COLUMN fail_code text GENERATED ALWAYS AS (error->>'code') STORED"
    )
    op.execute(
        f"ALTER TABLE workflow_instances ADD COLUMN fail_group text GENERATED ALWAYS AS ({ERROR_GROUP}) STORED"
    )
    op.execute(
        "CREATE INDEX ix_workflow_instances_failed ON workflow_instances (namespace_id, definition_id, fail_step, "
        "fail_code, fail_group, state, completed_at) WHERE state IN ('FAILED', 'NEEDS_REVIEW')"
    )
    op.execute("SET CONSTRAINTS ALL DEFERRED")  # back to the tables' own (workflow_tasks -> workflow_steps)


def downgrade() -> None:
    op.execute("DROP INDEX ix_workflow_instances_failed")
    op.execute(
        "ALTER TABLE workflow_instances DROP COLUMN fail_group, DROP COLUMN fail_code, DROP COLUMN fail_step"
    )
    op.execute("DROP INDEX ix_workflow_instances_key_lower")
    op.execute("DROP INDEX ix_workflow_instances_id_prefix")
    op.execute("ALTER TABLE workflow_tasks DROP COLUMN failure")
    op.execute("ALTER TABLE workflow_tasks DROP COLUMN worker")
    op.execute("ALTER TABLE workflow_steps DROP COLUMN copied_from")
    op.execute("DROP TABLE workflow_reruns")
