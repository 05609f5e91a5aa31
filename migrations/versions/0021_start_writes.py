"""A workflow start writes no ``idempotency_receipts`` row and no ``operation_audit`` row (issue 27).

- ``workflow_instances.start_key`` / ``start_fingerprint``: the Idempotency-Key of the
  ``POST /v1/workflows`` request that created the instance and that request's fingerprint (method,
  path and body), written by the instance's INSERT. ``uq_workflow_instances_start_key``: one instance
  per (namespace, key) among the instances that carry a key (the key's owner for
  ``app.idempotency.RETENTION_HOURS``; a start with a key older than that frees it on the old instance).
- ``workflow_event_batches.start_response``: the exact response body of the start, on the batch its
  transaction wrote for the new instance (NULL on every other batch): a resent start answers it again,
  the first-acceptance snapshot.
- The view ``workflow_operations``: an audit entry of a batch may name its actor (``actor_id``,
  ``actor_name``), ``request_id``, ``reason`` and ``evidence_ref``, as an ``operation_audit`` row does: the
  ``workflow.start`` entry of a start is written with the start's batch. Such an entry is dated by the
  batch's ``created_at`` (its transaction's start, as the instance's ``created_at``), so it precedes the
  engine's entries of the same transaction (dated ``audited_at``, actor ``system:engine``).

The columns are added without a default (no table rewrite). Receipts of starts accepted before this
migration stay in ``idempotency_receipts`` and are still replayed from there until they expire.

The downgrade gives the starts of the last ``RETENTION_HOURS`` their ``idempotency_receipts`` row back
(from the key on the instance and the response on its batch) and keeps the view's definition: the batches
may hold start entries with their actor, which migration 0018's definition would show as the engine's.

Revision ID: 0021_start_writes
Revises: 0020_lazy_steps
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0021_start_writes"
down_revision = "0021_wait_receipt"
branch_labels = None
depends_on = None

RETENTION_HOURS = 24  # app.idempotency.RETENTION_HOURS when this migration was written
START_ROUTE = "POST /v1/workflows"

OPERATIONS_VIEW = """
CREATE OR REPLACE VIEW workflow_operations AS
SELECT id, NULL::text AS batch_id, namespace_id, actor_id, actor_name, action, target_type, target_id, workflow_id,
       operation_id, reason, evidence_ref, request_id, before, after, created_at
FROM operation_audit
UNION ALL
SELECT left(b.id, 29) || lpad(to_hex((2047 + a.ord)::int), 3, '0'), b.id, b.namespace_id,
       COALESCE(a.e ->> 'actor_id', 'system:engine'),
       CASE WHEN a.e ? 'actor_id' THEN a.e ->> 'actor_name' ELSE 'ledgerflow engine' END,
       a.e ->> 'action', a.e ->> 'target_type', a.e ->> 'target_id', b.instance_id,
       a.e ->> 'operation_id', a.e ->> 'reason', a.e ->> 'evidence_ref', a.e ->> 'request_id',
       a.e -> 'before', a.e -> 'after',
       CASE WHEN a.e ? 'actor_id' THEN b.created_at ELSE b.audited_at END
FROM workflow_event_batches b CROSS JOIN LATERAL jsonb_array_elements(b.audit) WITH ORDINALITY AS a(e, ord)
"""


def upgrade() -> None:
    op.add_column("workflow_instances", sa.Column("start_key", sa.Text()))
    op.add_column("workflow_instances", sa.Column("start_fingerprint", sa.Text()))
    op.create_index(
        "uq_workflow_instances_start_key",
        "workflow_instances",
        ["namespace_id", "start_key"],
        unique=True,
        postgresql_where=sa.text("start_key IS NOT NULL"),
    )
    op.add_column("workflow_event_batches", sa.Column("start_response", sa.Text()))
    op.execute(OPERATIONS_VIEW)


def downgrade() -> None:
    op.execute(
        f"""
INSERT INTO idempotency_receipts (scope, route, key, fingerprint, status_code, response, created_at)
SELECT i.namespace_id, '{START_ROUTE}', i.start_key, i.start_fingerprint, 201, b.start_response, i.created_at
FROM workflow_instances i
JOIN workflow_event_batches b ON b.instance_id = i.id AND b.start_response IS NOT NULL
WHERE i.start_key IS NOT NULL AND i.created_at >= now() - make_interval(hours => {RETENTION_HOURS})
ON CONFLICT (scope, route, key) DO NOTHING
"""
    )
    op.drop_column("workflow_event_batches", "start_response")
    op.drop_index("uq_workflow_instances_start_key", table_name="workflow_instances")
    op.drop_column("workflow_instances", "start_fingerprint")
    op.drop_column("workflow_instances", "start_key")
