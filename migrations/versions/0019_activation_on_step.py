"""The current activation of a step lives on its step row; ``workflow_activations`` keeps only the
activations a later one replaced (an operator's RETRY_STEP).

A step's first activation used to cost an activation INSERT beside the step's UPDATE, and its end an
activation UPDATE beside the step's: two row writes per step that carried nothing the step row could
not. The step row now carries its current activation (``act_state``, ``act_input``, ``act_output``,
``act_error``, ``task_attempts``, ``child_instance_id``, the POLL bookkeeping, ``activated_at``,
``completed_at``); a new activation of a step that already had one copies the old one into
``workflow_activations`` first. ``workflow_all_activations`` is the union the history reads.

Tasks and waits keep their ``activation_id``; it names the step's current activation or an archived
row, so the foreign keys to ``workflow_activations`` are dropped (each task still references its step).

Revision ID: 0019_act_on_step
Revises: 0019_quota_tasks
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0019_act_on_step"
down_revision = "0019_quota_tasks"
branch_labels = None
depends_on = None

_STATES = "('BLOCKED', 'ACTIVE', 'WAITING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'NEEDS_REVIEW', 'SKIPPED')"

_COLS = (
    "task_attempts, child_instance_id, poll_used_rounds, poll_first_round, poll_first_round_attempts_used, "
    "poll_round_attempts, poll_deadline_at, poll_last_task_id, poll_current_task_id, poll_next_at, "
    "poll_resolved_at, activated_at, completed_at"
)

VIEW = f"""
CREATE VIEW workflow_all_activations AS
SELECT id, instance_id, step_id, sequence, state, input, output, error, {_COLS}
FROM workflow_activations
UNION ALL
SELECT activation_id, instance_id, id, activation_sequence, act_state, act_input, act_output, act_error, {_COLS}
FROM workflow_steps WHERE activation_id IS NOT NULL
"""


def upgrade() -> None:
    op.drop_constraint("workflow_tasks_activation_id_fkey", "workflow_tasks", type_="foreignkey")
    op.drop_constraint("workflow_waits_activation_id_fkey", "workflow_waits", type_="foreignkey")
    for name, type_ in (
        ("act_state", sa.Text()),
        ("act_input", sa.dialects.postgresql.JSONB()),
        ("act_output", sa.dialects.postgresql.JSONB()),
        ("act_error", sa.dialects.postgresql.JSONB()),
        ("task_attempts", sa.Integer()),
        ("child_instance_id", sa.Text()),
        ("poll_used_rounds", sa.Integer()),
        ("poll_first_round", sa.Integer()),
        ("poll_first_round_attempts_used", sa.Integer()),
        ("poll_round_attempts", sa.Integer()),
        ("poll_deadline_at", sa.DateTime(timezone=True)),
        ("poll_last_task_id", sa.Text()),
        ("poll_current_task_id", sa.Text()),
        ("poll_next_at", sa.DateTime(timezone=True)),
        ("poll_resolved_at", sa.DateTime(timezone=True)),
        ("activated_at", sa.DateTime(timezone=True)),
        ("completed_at", sa.DateTime(timezone=True)),
    ):
        op.add_column("workflow_steps", sa.Column(name, type_, nullable=True))
    op.create_check_constraint("ck_workflow_steps_act_state", "workflow_steps", f"act_state IN {_STATES}")
    # every current activation moves onto its step, and leaves the table of replaced ones
    op.execute(
        """
UPDATE workflow_steps s SET act_state = a.state, act_input = a.input, act_output = a.output,
    act_error = a.error, task_attempts = a.task_attempts, child_instance_id = a.child_instance_id,
    poll_used_rounds = a.poll_used_rounds, poll_first_round = a.poll_first_round,
    poll_first_round_attempts_used = a.poll_first_round_attempts_used,
    poll_round_attempts = a.poll_round_attempts, poll_deadline_at = a.poll_deadline_at,
    poll_last_task_id = a.poll_last_task_id, poll_current_task_id = a.poll_current_task_id,
    poll_next_at = a.poll_next_at, poll_resolved_at = a.poll_resolved_at,
    activated_at = a.activated_at, completed_at = a.completed_at
FROM workflow_activations a WHERE a.id = s.activation_id
"""
    )
    op.execute("DELETE FROM workflow_activations a USING workflow_steps s WHERE s.activation_id = a.id")
    op.create_index(
        "ix_workflow_steps_activation",
        "workflow_steps",
        ["activation_id"],
        postgresql_where=sa.text("activation_id IS NOT NULL"),
    )
    op.execute(VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW workflow_all_activations")
    op.drop_index("ix_workflow_steps_activation", table_name="workflow_steps")
    op.execute(
        f"""
INSERT INTO workflow_activations (id, instance_id, step_id, sequence, state, input, output, error, {_COLS})
SELECT activation_id, instance_id, id, activation_sequence, act_state, act_input, act_output, act_error,
    COALESCE(task_attempts, 0), child_instance_id, poll_used_rounds, poll_first_round,
    poll_first_round_attempts_used, poll_round_attempts, poll_deadline_at, poll_last_task_id,
    poll_current_task_id, poll_next_at, poll_resolved_at, COALESCE(activated_at, now()), completed_at
FROM workflow_steps WHERE activation_id IS NOT NULL
"""
    )
    op.drop_constraint("ck_workflow_steps_act_state", "workflow_steps", type_="check")
    for name in ("act_state", "act_input", "act_output", "act_error", *_COLS.split(", ")):
        op.drop_column("workflow_steps", name)
    op.create_foreign_key(None, "workflow_tasks", "workflow_activations", ["activation_id"], ["id"])
    op.create_foreign_key(None, "workflow_waits", "workflow_activations", ["activation_id"], ["id"])
