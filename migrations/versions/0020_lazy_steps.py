"""A step's row is inserted when the step is first activated: BLOCKED steps and the ``$root`` step are
not stored.

A start used to insert one BLOCKED row per declared step plus a ``$root`` row (SUCCEEDED) nothing read,
and each activation then updated its step's row. The readers now take the BLOCKED steps from the pinned
definition document (``store.read_steps``), and ``step_moves.activate`` inserts the row of a step's first
activation (ACTIVE / WAITING, revision 2). This migration deletes the stored BLOCKED and ``$root`` rows
(none is referenced: a task, an activation or a wait names a step only once it was activated).

A step's first task is inserted before its row (the task's id goes onto the row), so the foreign key
from ``workflow_tasks.step_id`` is checked at commit (DEFERRABLE INITIALLY DEFERRED).

Revision ID: 0020_lazy_steps
Revises: 0019_act_on_step
Create Date: 2026-12-03
"""

from alembic import op

revision = "0020_lazy_steps"
down_revision = "0019_act_on_step"
branch_labels = None
depends_on = None

_FK = "workflow_tasks_step_id_fkey"


def upgrade() -> None:
    op.drop_constraint(_FK, "workflow_tasks", type_="foreignkey")
    op.create_foreign_key(
        _FK,
        "workflow_tasks",
        "workflow_steps",
        ["step_id"],
        ["id"],
        deferrable=True,
        initially="DEFERRED",
    )
    op.execute("DELETE FROM workflow_steps WHERE state = 'BLOCKED' OR kind = 'ROOT'")


def downgrade() -> None:
    # every declared step without a row gets its BLOCKED row back, every instance its $root
    op.execute(
        """
INSERT INTO workflow_steps (id, instance_id, key, kind, state, after)
SELECT md5(i.id || '/' || (st->>'key')), i.id, st->>'key', st->>'kind', 'BLOCKED',
       ARRAY(SELECT jsonb_array_elements_text(COALESCE(st->'after', '[]'::jsonb)))
FROM workflow_instances i
JOIN workflow_definition_versions v ON v.id = i.definition_version_id
CROSS JOIN LATERAL jsonb_array_elements(v.document->'steps') st
WHERE NOT EXISTS (SELECT 1 FROM workflow_steps s WHERE s.instance_id = i.id AND s.key = st->>'key')
"""
    )
    op.execute(
        "INSERT INTO workflow_steps (id, instance_id, key, kind, state, after) "
        "SELECT md5(i.id || '/$root'), i.id, '$root', 'ROOT', 'SUCCEEDED', '{}' FROM workflow_instances i"
    )
    op.drop_constraint(_FK, "workflow_tasks", type_="foreignkey")
    op.create_foreign_key(_FK, "workflow_tasks", "workflow_steps", ["step_id"], ["id"])
