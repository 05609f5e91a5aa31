"""A start no longer locks its definition's rows (issue 49): the foreign keys of ``workflow_instances``
into ``workflow_definitions`` and ``workflow_definition_versions`` are dropped, and both tables refuse a
DELETE instead.

A foreign key's check on insert locks the referenced row ``FOR KEY SHARE``: every start of a definition
locked the same two rows, one WAL record each, and when two starts overlapped (most of the time under
load) PostgreSQL wrote a MultiXact for the row's lockers, 0.7 per workflow in ``bench.workflows``, whose
members later readers of the rows look up again. The product never deletes a definition or a version (no
statement does: ``tests/db/test_schema.py``), so the keys guarded only against a hand-made DELETE: the
trigger ``never_deleted`` refuses that, on the two tables, at no cost to a start.

Catalog changes only, whatever the tables' sizes.

Revision ID: 0035_definitions_unlocked
Revises: 0034_instance_state_unindexed
Create Date: 2026-12-06
"""

from alembic import op

revision = "0035_definitions_unlocked"
down_revision = "0034_instance_state_unindexed"
branch_labels = None
depends_on = None

TABLES = ("workflow_definitions", "workflow_definition_versions")


def upgrade() -> None:
    op.execute("ALTER TABLE workflow_instances DROP CONSTRAINT workflow_instances_definition_id_fkey")
    op.execute("ALTER TABLE workflow_instances DROP CONSTRAINT workflow_instances_definition_version_id_fkey")
    op.execute(
        """
CREATE FUNCTION never_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rows of % are never deleted: workflow instances name them', TG_TABLE_NAME
        USING ERRCODE = 'foreign_key_violation';
END $$
"""
    )
    for table in TABLES:
        op.execute(
            f"CREATE TRIGGER never_deleted BEFORE DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION never_deleted()"
        )


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"DROP TRIGGER never_deleted ON {table}")
    op.execute("DROP FUNCTION never_deleted()")
    op.execute(
        "ALTER TABLE workflow_instances ADD CONSTRAINT workflow_instances_definition_id_fkey "
        "FOREIGN KEY (definition_id) REFERENCES workflow_definitions (id)"
    )
    op.execute(
        "ALTER TABLE workflow_instances ADD CONSTRAINT workflow_instances_definition_version_id_fkey "
        "FOREIGN KEY (definition_version_id) REFERENCES workflow_definition_versions (id)"
    )
