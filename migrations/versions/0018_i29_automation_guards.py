"""Hostile tenants, second round: automation that cannot amplify, and rules, schedules and
subscriptions that act with their author's rights.

- ``workflow_instances.automation_chain``: the automation rules that led to an instance started by a
  rule, oldest first (the last one started it; its length is the instance's automation depth). NULL for
  an instance started any other way. A rule never fires on events of an instance whose chain (or whose
  parent's, for a sub-workflow) holds it, and no rule fires past ``MAX_CHAIN_DEPTH``.
- ``automation_rules.created_by``: the credential whose rights the rule acts with (checked when it acts;
  enabling the rule again makes the enabling credential its author). Filled from the rule's creation
  audit row for rules that exist already.
- ``automation_rules.disabled_reason``: why the rule disabled itself (its rate budget was spent, or its
  author was revoked or lost the right), like a subscription's.
- ``automation_rules.budget_window_at`` / ``budget_used``: the rule's executions in its current
  one-minute window (its rate budget).
- ``event_subscriptions.created_by``: the same for subscriptions (deliveries stop when the author is
  revoked). Filled from the creation audit row.

Every column is added without a default or with a constant one: no table rewrite.

Revision ID: 0018_i29
Revises: 0018_i27
Create Date: 2026-12-10
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0018_i29"
down_revision = "0018_i27"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workflow_instances", sa.Column("automation_chain", ARRAY(sa.Text())))
    op.add_column("automation_rules", sa.Column("created_by", sa.Text()))
    op.add_column("automation_rules", sa.Column("disabled_reason", sa.Text()))
    op.add_column("automation_rules", sa.Column("budget_window_at", sa.DateTime(timezone=True)))
    op.add_column(
        "automation_rules",
        sa.Column("budget_used", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column("event_subscriptions", sa.Column("created_by", sa.Text()))
    for table, action in (
        ("automation_rules", "automation_rule.create"),
        ("event_subscriptions", "event_subscription.create"),
    ):
        op.execute(
            f"UPDATE {table} t SET created_by = a.actor_id FROM operation_audit a "
            f"WHERE a.action = '{action}' AND a.target_id = t.id AND t.created_by IS NULL"
        )


def downgrade() -> None:
    op.drop_column("event_subscriptions", "created_by")
    for column in ("budget_used", "budget_window_at", "disabled_reason", "created_by"):
        op.drop_column("automation_rules", column)
    op.drop_column("workflow_instances", "automation_chain")
